"""Embedding models: the model's feature output as one vector per image, pooled and L2-normalised
as the ``FerryEmbedding`` config says (torchvision / timm feature extractors, face and image
retrieval models). Served by ``/embed`` and as the ``EMBEDDING`` output of V2 infer."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from ferry.errors import ModelLoadError
from ferry.types import TensorSpec
from ferry_client.protocol import model_config_pb2 as mc

_EMB = mc.FerryEmbedding
#: The V2 output name of the vectors (unless the model has an output of that name).
EMBEDDING_OUTPUT = "EMBEDDING"


def check_embedding(spec: mc.FerryEmbedding, dims: Sequence[int], max_batch_size: int) -> None:
    """Refuse at load an unknown pooling, or pooling an output that is no feature map."""
    if spec.pooling not in _EMB.Pooling.values():
        raise ModelLoadError(f"ferry_image.embedding.pooling: unknown value {spec.pooling}")
    features = feature_dims(dims, max_batch_size)
    if spec.pooling != _EMB.FLATTEN and len(features) < 2:
        raise ModelLoadError(
            f"ferry_image.embedding.pooling: {_EMB.Pooling.Name(spec.pooling)} needs a channels-first feature "
            f"map [C, H, W] per image; the output's dims are {list(dims)} (use pooling: FLATTEN)"
        )


def feature_dims(dims: Sequence[int], max_batch_size: int) -> tuple[int, ...]:
    """One image's feature dims: a model that cannot batch may declare its batch of one first."""
    if max_batch_size == 0 and len(dims) > 1 and dims[0] == 1:
        return tuple(dims[1:])
    return tuple(dims)


def embedding_tensor_spec(spec: mc.FerryEmbedding, dims: Sequence[int], max_batch_size: int) -> TensorSpec:
    """The ``EMBEDDING`` output: FP32 [images, D], D = every feature (FLATTEN) or the channels."""
    features = feature_dims(dims, max_batch_size)
    kept = features if spec.pooling == _EMB.FLATTEN else features[:1]
    length = -1 if any(d < 0 for d in kept) else prod(kept)
    return TensorSpec(EMBEDDING_OUTPUT, "FP32", (length,))


def embeddings(features: np.ndarray, spec: mc.FerryEmbedding, max_batch_size: int) -> np.ndarray:
    """[images, ...] features to [images, D] float32 vectors.

    MEAN / MAX pool every axis after the channel axis (the first one per image, after the leading
    batch-of-one axis a non-batching model may declare); FLATTEN keeps everything, C-order, as
    ``torch.flatten(x, 1)``. With ``l2_normalize`` each row is divided by its norm (a zero row
    stays zero, as ``torch.nn.functional.normalize``'s eps does).
    """
    values = np.asarray(features, dtype=np.float32)
    images = values.shape[0]
    per_image = values.reshape(images, *feature_dims(values.shape[1:], max_batch_size))
    if spec.pooling != _EMB.FLATTEN:
        axes = tuple(range(2, per_image.ndim))
        per_image = per_image.mean(axis=axes) if spec.pooling == _EMB.MEAN else per_image.max(axis=axes)
    vectors = np.ascontiguousarray(per_image.reshape(images, -1), dtype=np.float32)
    if spec.l2_normalize:
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
        vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return vectors
