"""Ultralytics-style heads whose boxes are already decoded to input pixels (YOLOv8, YOLOv5).

Their anchor count is fixed by the input size and the strides (one anchor per cell for YOLOv8,
three for YOLOv5), which is what tells a YOLOv5 output from a raw YOLOX one of the same layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from .base import ANY, Candidates, Decoder, centre_to_corners, class_choice, grid_cells

_DET = mc.FerryDetection
#: Ultralytics' detection strides (P3-P5).
DEFAULT_STRIDES = (8, 16, 32)
#: YOLOv5 predicts three anchor shapes per cell.
YOLOV5_ANCHORS_PER_CELL = 3


def to_corners(boxes: np.ndarray, box_format: int) -> np.ndarray:
    """Boxes in the configured ``box_format`` to x1, y1, x2, y2."""
    return boxes if box_format == _DET.XYXY else centre_to_corners(boxes)


def anchor_count(decoder: Decoder, per_cell: int, default_strides: Sequence[int]) -> int | None:
    """Anchors the head has for this input size, or None when the input size is dynamic."""
    if decoder.size.width <= 0 or decoder.size.height <= 0:
        return None
    strides = list(decoder.spec.strides) or list(default_strides)
    return per_cell * sum(rows * columns for rows, columns in grid_cells(decoder.size, strides))


class YoloV8Decoder(Decoder):
    """[batch, 4 + classes, anchors]: box, then one score per class (no objectness).

    The anchor count is checked only when ``strides`` is configured, since small custom heads
    often drop a level."""

    name = "YOLOV8"
    outputs = ("[batch, 4 + classes, anchors]",)

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        anchors = anchor_count(self, 1, DEFAULT_STRIDES) if self.spec.strides else ANY
        channels = shapes[0][1] if len(shapes[0]) == 3 and shapes[0][1] >= 5 else 5
        return [(ANY, channels, anchors)]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        result = []
        threshold = score_threshold
        for image in tensors[0]:
            rows, scores, classes = class_choice(image[4:].T, self.spec.multi_label, threshold)
            result.append(Candidates(to_corners(image[:4].T[rows], self.spec.box_format), scores, classes))
        return result


class YoloV5Decoder(Decoder):
    """[batch, anchors, 5 + classes]: box, objectness, class probabilities; score = obj * prob."""

    name = "YOLOV5"
    outputs = ("[batch, anchors, 5 + classes]",)

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        anchors = anchor_count(self, YOLOV5_ANCHORS_PER_CELL, DEFAULT_STRIDES)
        channels = shapes[0][2] if len(shapes[0]) == 3 and shapes[0][2] >= 6 else 6
        return [(ANY, anchors, channels)]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        result = []
        threshold = score_threshold
        for image in tensors[0]:
            class_scores = image[:, 5:].astype(np.float32) * image[:, 4:5].astype(np.float32)
            rows, scores, classes = class_choice(class_scores, self.spec.multi_label, threshold)
            result.append(Candidates(to_corners(image[rows, :4], self.spec.box_format), scores, classes))
        return result
