"""DETR-family set predictors (DETR, RT-DETR, DINO): boxes [batch, queries, 4] as normalised
cx, cy, w, h and scores [batch, queries, classes]. One prediction per query, so no NMS.

DETR's softmax scores end with a "no object" class, dropped after the softmax
(``score_activation: SOFTMAX``); RT-DETR's are independent sigmoids (``SIGMOID``, usually with
``multi_label``, as its post-processor takes the top scores over every query and class).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from .base import ANY, Candidates, Decoder, activate, centre_to_corners, class_choice

_DET = mc.FerryDetection


class DetrDecoder(Decoder):
    name = "DETR"
    clips_boxes = False  # DETR's post-process scales the boxes, no clipping
    outputs = ("boxes [batch, queries, 4]", "scores [batch, queries, classes]")
    default_suppression = _DET.NO_NMS

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        queries = shapes[0][1] if len(shapes[0]) == 3 and shapes[0][1] != -1 else ANY
        return [(ANY, queries, 4), (ANY, queries, ANY)]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        boxes, logits = tensors
        scale = np.array([self.size.width, self.size.height] * 2, dtype=np.float64)
        threshold = score_threshold
        result = []
        for image_boxes, image_logits in zip(boxes, logits, strict=True):
            probabilities = activate(image_logits, self.spec.score_activation)
            if self.spec.score_activation == _DET.SOFTMAX:
                probabilities = probabilities[:, :-1]
            rows, scores, classes = class_choice(probabilities, self.spec.multi_label, threshold)
            corners = centre_to_corners(image_boxes.astype(np.float64)) * scale
            result.append(Candidates(corners[rows], scores, classes))
        return result
