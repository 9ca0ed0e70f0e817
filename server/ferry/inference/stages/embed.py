"""Post-stages of an embedding model: one vector per image, for ``/embed`` (a list per image) and
for V2 infer (the ``EMBEDDING`` tensor, see ``pipelines.embedding``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...pipelines.embedding import EMBEDDING_OUTPUT
from ...pipelines.preprocess import ImageTransform
from ...pipelines.runtime import ImagePipeline
from .pipeline_task import PipelineTask, with_item_axis


class Embed(PipelineTask):
    """``/embed`` on a model whose ``ferry_image`` declares embedding."""

    cheap = True  # a pooling and a norm over one feature map per image

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]:
        vectors: list[Any] = self.pipeline.embed(outputs).tolist()
        return vectors


class EmbeddingTensors:
    """The ``EMBEDDING`` output a V2 infer request may ask for: float32 [images, D]."""

    cheap = True

    def __init__(self, pipeline: ImagePipeline) -> None:
        self.pipeline = pipeline

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> dict[str, np.ndarray]:
        return {EMBEDDING_OUTPUT: self.pipeline.embed(with_item_axis(self.pipeline, outputs, transforms))}
