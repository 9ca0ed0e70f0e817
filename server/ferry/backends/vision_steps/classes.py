"""``classification``: logits -> the top-k class ids and scores (softmax first when asked)."""

from __future__ import annotations

import math

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from ...errors import ModelLoadError
from ...pipelines.classification import softmax, top_k
from .backend import StepCompute, settings, tensor_dims
from .images import require


def classification_step(config: mc.ModelConfig) -> StepCompute:
    """Reads ``LOGITS``; writes ``CLASS_IDS`` (INT32 [k]) and ``SCORES`` (FP32 [k]); k from their dims."""
    options = settings(config, "classification", mc.FerryClassification)
    tensor_dims(config, "input", "LOGITS")
    k = tensor_dims(config, "output", "CLASS_IDS")[-1]
    if k < 1:
        raise ModelLoadError("output 'CLASS_IDS' needs a fixed last dim k (how many classes to return)")
    if options.top_k and options.top_k != k:
        raise ModelLoadError(f"classification.top_k {options.top_k} differs from k = {k}, the dims of 'CLASS_IDS'")
    if options.output:
        raise ModelLoadError("classification.output is not used by the step: it reads 'LOGITS'")
    batched = config.max_batch_size > 0
    require(config, "output", "CLASS_IDS", "INT32", (k,) if batched else (-1, k))
    require(config, "output", "SCORES", "FP32", (k,) if batched else (-1, k))

    def compute(inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        logits = inputs["LOGITS"]
        rows = logits.reshape(logits.shape[0], math.prod(logits.shape[1:])).astype(np.float32, copy=False)
        scores = softmax(rows) if options.softmax else rows
        indices, values = top_k(scores, min(k, scores.shape[1]))
        return {"CLASS_IDS": indices.astype(np.int32), "SCORES": values.astype(np.float32)}

    return compute
