"""Raw-grid YOLOX heads: [batch, anchors, 5 + classes] with one anchor per cell of each stride.

Each row holds the offset of the box centre from its cell and the log of its size, both in
stride units, then objectness and class scores (sigmoid already applied in YOLOX's exports;
``score_activation`` covers heads that leave logits). Score = objectness * class score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from .base import ANY, Candidates, Decoder, InputSize, activate, class_choice, grid_cells, grid_points
from .yolo import DEFAULT_STRIDES, anchor_count


class YoloxDecoder(Decoder):
    name = "YOLOX"
    clips_boxes = False  # the YOLOX repository's demo divides by the ratio, no clipping
    outputs = ("[batch, anchors, 5 + classes]",)

    def __init__(self, spec: mc.FerryDetection, size: InputSize) -> None:
        super().__init__(spec, size)
        self.require_fixed_size()

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        channels = shapes[0][2] if len(shapes[0]) == 3 and shapes[0][2] >= 6 else 6
        return [(ANY, anchor_count(self, 1, DEFAULT_STRIDES), channels)]

    def _grid(self) -> tuple[np.ndarray, np.ndarray]:
        """(anchors, 2) cell x, y and (anchors, 1) stride of every row, level by level."""
        strides = list(self.spec.strides) or list(DEFAULT_STRIDES)
        levels = grid_cells(self.size, strides)
        points = np.concatenate([grid_points(rows, columns) for rows, columns in levels])
        scale = np.concatenate(
            [np.full(rows * columns, s, np.float64) for (rows, columns), s in zip(levels, strides, strict=True)]
        )
        return points, scale[:, None]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        points, stride = self._grid()
        threshold = score_threshold
        result = []
        for image in tensors[0]:
            raw = image.astype(np.float64)
            centres = (raw[:, 0:2] + points) * stride
            half = np.exp(raw[:, 2:4]) * stride / 2.0
            boxes = np.concatenate([centres - half, centres + half], axis=1)
            probabilities = activate(image[:, 4:], self.spec.score_activation)
            class_scores = probabilities[:, 1:] * probabilities[:, 0:1]
            rows, scores, classes = class_choice(class_scores, self.spec.multi_label, threshold)
            result.append(Candidates(boxes[rows], scores, classes))
        return result
