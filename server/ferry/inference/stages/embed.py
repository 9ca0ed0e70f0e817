"""Post-stages of an embedding model: one vector per image, for ``/embed`` (a list per image) and
for V2 infer (the ``EMBEDDING`` tensor, see ``pipelines.embedding``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...pipelines.embedding import EMBEDDING_OUTPUT
from ...pipelines.preprocess import ImageTransform
from ...pipelines.runtime import ImagePipeline
from ...repository.model import ModelVersion
from ...types import InferenceRequest
from ..validation import as_batch_of_one
from .encoded_images import image_bytes_request


class Embed:
    """``/embed`` on a model whose ``ferry_image`` declares embedding."""

    cheap = True  # a pooling and a norm over one feature map per image

    def __init__(self, pipeline: ImagePipeline) -> None:
        self.pipeline = pipeline
        self.outputs = pipeline.output_names

    def request(self, model: ModelVersion, images: list[bytes], parameters: dict[str, Any]) -> InferenceRequest:
        return image_bytes_request(model, self.pipeline.input_name, images, parameters)

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]:
        vectors: list[Any] = self.pipeline.embed(outputs).tolist()
        return vectors


class EmbeddingTensors:
    """The ``EMBEDDING`` output a V2 infer request may ask for: float32 [images, D]."""

    cheap = True

    def __init__(self, pipeline: ImagePipeline) -> None:
        self.pipeline = pipeline

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> dict[str, np.ndarray]:
        if not transforms and self.pipeline.max_batch_size == 0:
            # tensors sent as they are to a model that cannot batch: one image, no image axis yet
            outputs = {name: as_batch_of_one(array) for name, array in outputs.items()}
        return {EMBEDDING_OUTPUT: self.pipeline.embed(outputs)}
