"""What the stages on a model's own image pipeline (``ferry_image``) share: where an image
endpoint's images go, and the item axis of tensors a model that cannot batch was sent as they are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...pipelines.preprocess import ImageTransform
from ...pipelines.runtime import ImagePipeline
from ...repository.model import ModelSpec
from ...types import InferenceRequest
from ..validation import as_batch_of_one
from .encoded_images import image_bytes_request


class PipelineTask:
    """An image endpoint's stage on the pipeline: its images go to the pipeline's input, and the
    pipeline's outputs come back to it."""

    def __init__(self, pipeline: ImagePipeline) -> None:
        self.pipeline = pipeline
        self.outputs = pipeline.output_names

    def request(self, model: ModelSpec, images: list[bytes], parameters: dict[str, Any]) -> InferenceRequest:
        return image_bytes_request(model, self.pipeline.input_name, images, parameters)


def with_item_axis(
    pipeline: ImagePipeline, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]
) -> dict[str, np.ndarray]:
    """``outputs`` with a leading item axis: tensors sent as they are (no image transforms) to a
    model that cannot batch are one item (image, text line) without one yet."""
    if not transforms and pipeline.max_batch_size == 0:
        return {name: as_batch_of_one(array) for name, array in outputs.items()}
    return outputs
