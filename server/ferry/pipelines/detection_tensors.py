"""Decoded detections as fixed-size V2 tensors, one row of K per image (TensorRT EfficientNMS's
layout): ``num_detections`` [N, 1], ``detection_boxes`` [N, K, 4] (x1, y1, x2, y2 in original
pixels), ``detection_scores`` [N, K], ``detection_classes`` [N, K] (-1 past the count) and, for
decoders that predict them, ``detection_keypoints`` [N, K, P, 2]; rows past the count are zeros.

The ensemble detection step and the V2 infer outputs of detection models both use it, so a client
reads the same tensors whichever way it asked.
"""

from __future__ import annotations

import numpy as np

from ..types import TensorSpec
from .detection import Detection

NUM_DETECTIONS = "num_detections"
BOXES = "detection_boxes"
SCORES = "detection_scores"
CLASSES = "detection_classes"
KEYPOINTS = "detection_keypoints"
POLYGONS = "detection_polygons"


def detection_tensors(
    found: list[list[Detection]], limit: int, keypoints: int = 0, polygons: bool = False
) -> dict[str, np.ndarray]:
    """The tensors of each image's detections (at most ``limit`` each); ``keypoints`` > 0 adds
    ``detection_keypoints`` with that many points per detection, ``polygons`` adds
    ``detection_polygons`` [N, K, 4, 2] (the quadrilaterals of text detectors)."""
    count = len(found)
    tensors = {
        NUM_DETECTIONS: np.zeros((count, 1), np.int32),
        BOXES: np.zeros((count, limit, 4), np.float32),
        SCORES: np.zeros((count, limit), np.float32),
        CLASSES: np.full((count, limit), -1, np.int32),
    }
    if keypoints:
        tensors[KEYPOINTS] = np.zeros((count, limit, keypoints, 2), np.float32)
    if polygons:
        tensors[POLYGONS] = np.zeros((count, limit, 4, 2), np.float32)
    for image, detections in enumerate(found):
        tensors[NUM_DETECTIONS][image, 0] = len(detections)
        for row, detection in enumerate(detections):
            tensors[BOXES][image, row] = detection.box
            tensors[SCORES][image, row] = detection.score
            tensors[CLASSES][image, row] = detection.class_id
            if keypoints and detection.keypoints is not None:
                tensors[KEYPOINTS][image, row] = detection.keypoints
            if polygons and detection.polygon is not None:
                tensors[POLYGONS][image, row] = detection.polygon
    return tensors


def detection_tensor_specs(limit: int, keypoints: int = 0, polygons: bool = False) -> dict[str, TensorSpec]:
    """The tensors as outputs (dims after the image axis, which ``detection_tensors`` always has)."""
    specs = {
        NUM_DETECTIONS: TensorSpec(NUM_DETECTIONS, "INT32", (1,)),
        BOXES: TensorSpec(BOXES, "FP32", (limit, 4)),
        SCORES: TensorSpec(SCORES, "FP32", (limit,)),
        CLASSES: TensorSpec(CLASSES, "INT32", (limit,)),
    }
    if keypoints:
        specs[KEYPOINTS] = TensorSpec(KEYPOINTS, "FP32", (limit, keypoints, 2))
    if polygons:
        specs[POLYGONS] = TensorSpec(POLYGONS, "FP32", (limit, 4, 2))
    return specs
