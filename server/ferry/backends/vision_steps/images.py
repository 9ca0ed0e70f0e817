"""``decode_preprocess``: encoded images -> the model tensor, through the model pipeline's code."""

from __future__ import annotations

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from ...errors import ModelLoadError
from ...pipelines.preprocess import PreprocessSpec
from ...pipelines.runtime import DEFAULT_MAX_PIXELS, ImagePipeline
from .backend import StepCompute, settings, tensor_datatype, tensor_dims
from .transforms import TRANSFORM_WIDTH, pack


def require(config: mc.ModelConfig, kind: str, name: str, datatype: str, dims: tuple[int, ...] | None = None) -> None:
    """Refuse a config whose tensor ``name`` lacks the datatype (and dims) the step produces or reads."""
    found = tensor_dims(config, kind, name)
    declared = tensor_datatype(config, kind, name)
    if declared != datatype or (dims is not None and found != dims):
        want = f"{datatype}" + (f" with dims {list(dims)}" if dims is not None else "")
        raise ModelLoadError(f"{kind} '{name}' must be {want}, got {declared} with dims {list(found)}")


def decode_preprocess_step(config: mc.ModelConfig) -> StepCompute:
    """Reads ``IMAGE`` (BYTES), writes ``TENSOR`` (shaped by its dims) and, if declared, ``TRANSFORM``."""
    require(config, "input", "IMAGE", "BYTES")
    dims = tensor_dims(config, "output", "TENSOR")
    spec = PreprocessSpec.from_config(
        settings(config, "preprocess", mc.FerryPreprocess),
        dims,
        tensor_datatype(config, "output", "TENSOR"),
        variable_sizes=False,
    )
    if any(t.name == "TRANSFORM" for t in config.output):
        require(config, "output", "TRANSFORM", "FP64", (TRANSFORM_WIDTH,))
    pipeline = ImagePipeline("IMAGE", spec, None, None, [], None, spec.max_pixels or DEFAULT_MAX_PIXELS)

    def compute(inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        prepared = pipeline.prepare(list(inputs["IMAGE"].reshape(-1)))
        assert isinstance(prepared.batch, np.ndarray)  # variable sizes are refused at load
        result = {"TENSOR": prepared.batch}
        if "TRANSFORM" in outputs:
            result["TRANSFORM"] = pack(prepared.transforms)
        return result

    return compute
