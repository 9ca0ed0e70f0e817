"""Post-stage: a detector's raw outputs as each image's detections in its own pixels (``/detect``).

The family's decoder, thresholds, NMS and the mapping back run here, in the worker pool, once per
execution for its whole batch: with thousands of candidates per image they take milliseconds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import InvalidArgument
from ...pipelines.detection import check_overrides
from ...pipelines.preprocess import ImageTransform
from ...pipelines.runtime import ImagePipeline
from .pipeline_task import PipelineTask


class Detect(PipelineTask):
    """``/detect`` on a model whose ``ferry_image`` declares detection."""

    cheap = False

    def __init__(
        self,
        pipeline: ImagePipeline,
        score_threshold: float | None,
        iou_threshold: float | None,
        max_detections: int | None,
    ) -> None:
        check_overrides(score_threshold, iou_threshold, max_detections)  # before any image is decoded
        super().__init__(pipeline)
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self.max_detections = max_detections

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]:
        if not transforms:
            raise InvalidArgument("detection needs encoded images: their original size maps boxes back")
        return self.pipeline.detect(
            outputs, list(transforms), self.score_threshold, self.iou_threshold, self.max_detections
        )
