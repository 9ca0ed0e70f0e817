"""End-to-end detectors (YOLOv10, models exported with NMS inside): [batch, K, 6] rows of
x1, y1, x2, y2, score, class in input pixels, already final, so no NMS by default."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from .base import ANY, Candidates, Decoder

_DET = mc.FerryDetection


class EndToEndDecoder(Decoder):
    name = "END_TO_END"
    outputs = ("[batch, K, 6] x1, y1, x2, y2, score, class",)
    default_suppression = _DET.NO_NMS

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        return [(ANY, ANY, 6)]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        return [Candidates(rows[:, :4], rows[:, 4], rows[:, 5]) for rows in tensors[0]]
