"""Post-stage: a classifier's output as the top-k classes of each image (``/classify``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import InvalidArgument
from ...pipelines.preprocess import ImageTransform
from ...pipelines.runtime import ImagePipeline
from .pipeline_task import PipelineTask


class Classify(PipelineTask):
    """``/classify`` on a model whose ``ferry_image`` declares classification (any model kind)."""

    cheap = True  # softmax and top-k over one row of scores per image

    def __init__(self, pipeline: ImagePipeline, top_k: int | None) -> None:
        if top_k is not None and top_k < 1:
            raise InvalidArgument(f"top_k must be >= 1, got {top_k}")
        super().__init__(pipeline)
        self.top_k = top_k

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]:
        return self.pipeline.classify(outputs, self.top_k)
