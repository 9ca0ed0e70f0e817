"""Already-decoded outputs in three tensors: boxes [batch, K, 4], scores [batch, K], classes [batch, K]."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from .base import ANY, Candidates, Decoder
from .yolo import to_corners

_DET = mc.FerryDetection


class BoxesScoresClassesDecoder(Decoder):
    """Class ids may be integers or floats; rows scoring zero are padding. Usually the model ran
    NMS itself, so Ferry suppresses again only when an IoU threshold is configured or requested."""

    name = "BOXES_SCORES_CLASSES"
    outputs = ("boxes [batch, K, 4]", "scores [batch, K]", "classes [batch, K]")
    default_suppression = _DET.NO_NMS

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        count = shapes[0][1] if len(shapes[0]) == 3 and shapes[0][1] != -1 else ANY
        return [(ANY, count, 4), (ANY, count), (ANY, count)]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        boxes, scores, classes = tensors
        return [
            Candidates(to_corners(boxes[i], self.spec.box_format), scores[i], classes[i]) for i in range(len(boxes))
        ]
