"""Post-stage: a detector's raw outputs as the decoded-detection tensors a V2 infer request may
ask for by name (``num_detections``, ``detection_boxes``, ...; see ``pipelines.detection_tensors``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...pipelines.preprocess import ImageTransform
from ...pipelines.runtime import ImagePipeline


class DetectionTensors:
    """The config's thresholds applied; one row of detections per image."""

    cheap = False

    def __init__(self, pipeline: ImagePipeline) -> None:
        self.pipeline = pipeline

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> dict[str, np.ndarray]:
        return self.pipeline.detection_tensors(outputs, list(transforms))
