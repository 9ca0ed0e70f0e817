"""Anchor-based SSD heads (MediaPipe BlazeFace, TF Object Detection SSD, torchvision SSD).

Outputs: regressions [batch, anchors, 4 + 2 * num_keypoints] and class scores
[batch, anchors, classes]. Anchors come from ``anchors`` (``ssd_anchors``); each regression is
decoded against its anchor by ``box_coder``: centre = raw / scale * anchor size + anchor
centre; size = raw / scale * anchor size, or exp(raw / scale) * anchor size with ``exp_size``.
Keypoints are decoded like centres. MediaPipe models pair this with ``WEIGHTED_NMS``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry.errors import FerryError
from ferry_client.protocol import model_config_pb2 as mc

from .base import ANY, Candidates, Decoder, InputSize, activate, class_choice
from .ssd_anchors import ssd_anchors


class SsdDecoder(Decoder):
    name = "SSD"
    clips_boxes = False  # MediaPipe returns boxes running past the edge
    outputs = ("regressions [batch, anchors, 4 + 2 * keypoints]", "scores [batch, anchors, classes]")

    def __init__(self, spec: mc.FerryDetection, size: InputSize) -> None:
        super().__init__(spec, size)
        if not spec.HasField("anchors"):
            raise FerryError("ferry_image.detection: format SSD needs an `anchors { ... }` section")
        self.require_fixed_size()
        self.anchors = ssd_anchors(spec.anchors, size)
        coder = spec.box_coder
        self.scales = np.array([coder.x_scale or 1.0, coder.y_scale or 1.0, coder.w_scale or 1.0, coder.h_scale or 1.0])

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        anchors = len(self.anchors)
        return [(ANY, anchors, 4 + 2 * int(self.spec.num_keypoints)), (ANY, anchors, ANY)]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        regressions, raw_scores = tensors
        threshold = score_threshold
        pixels = np.array([self.size.width, self.size.height], dtype=np.float64)
        result = []
        for image_regressions, image_scores in zip(regressions, raw_scores, strict=True):
            boxes, keypoints = self._decode_rows(image_regressions.astype(np.float64))
            probabilities = activate(image_scores, self.spec.score_activation)
            rows, scores, classes = class_choice(probabilities, self.spec.multi_label, threshold)
            points = keypoints[rows] * pixels if keypoints is not None else None
            result.append(Candidates(boxes[rows] * np.tile(pixels, 2), scores, classes, points))
        return result

    def _decode_rows(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(anchors, 4) relative x1, y1, x2, y2 and (anchors, K, 2) relative keypoints."""
        coder, anchors = self.spec.box_coder, self.anchors
        order = [1, 0, 3, 2] if coder.yx_order else [0, 1, 2, 3]
        values = raw[:, order] / self.scales
        centres = values[:, 0:2] * anchors[:, 2:4] + anchors[:, 0:2]
        sizes = (np.exp(values[:, 2:4]) if coder.exp_size else values[:, 2:4]) * anchors[:, 2:4]
        boxes = np.concatenate([centres - sizes / 2.0, centres + sizes / 2.0], axis=1)
        count = int(self.spec.num_keypoints)
        if not count:
            return boxes, None
        points = raw[:, 4 : 4 + 2 * count].reshape(-1, count, 2)
        if coder.yx_order:
            points = points[:, :, ::-1]
        points = points / self.scales[None, None, 0:2] * anchors[:, None, 2:4] + anchors[:, None, 0:2]
        return boxes, points
