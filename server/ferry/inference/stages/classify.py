"""Post-stage: a classifier's output as the top-k classes of each image (``/classify``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import InvalidArgument
from ...pipelines.preprocess import ImageTransform
from ...pipelines.runtime import ImagePipeline
from ...repository.model import ModelVersion
from ...types import InferenceRequest
from .encoded_images import image_bytes_request


class Classify:
    """``/classify`` on a model whose ``ferry_image`` declares classification (any model kind)."""

    cheap = True  # softmax and top-k over one row of scores per image

    def __init__(self, pipeline: ImagePipeline, top_k: int | None) -> None:
        if top_k is not None and top_k < 1:
            raise InvalidArgument(f"top_k must be >= 1, got {top_k}")
        self.pipeline = pipeline
        self.top_k = top_k
        self.outputs = pipeline.output_names

    def request(self, model: ModelVersion, images: list[bytes], parameters: dict[str, Any]) -> InferenceRequest:
        return image_bytes_request(model, self.pipeline.input_name, images, parameters)

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]:
        return self.pipeline.classify(outputs, self.top_k)
