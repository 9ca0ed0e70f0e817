"""Multi-level distribution heads (PP-PicoDet, GFL, NanoDet): one score output and one box
distribution output per stride.

Outputs: the score tensors of every level [batch, cells, classes], smallest stride first, then
the distribution tensors [batch, cells, 4 * bins] in the same order. Each edge distance (left,
top, right, bottom) is the expectation of a softmax over its bins, times the stride, measured
from the cell centre ((x + 0.5) * stride, as PicoDet). ``top_k_per_level`` keeps each level's
best cells by their best class score before NMS, as PicoDet's ``nms_top_k``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from .base import ANY, Candidates, Decoder, InputSize, activate, class_choice, grid_cells, grid_points

#: PicoDet's strides (P3-P6).
DEFAULT_STRIDES = (8, 16, 32, 64)


class DflDecoder(Decoder):
    name = "DFL"

    def __init__(self, spec: mc.FerryDetection, size: InputSize) -> None:
        super().__init__(spec, size)
        self.require_fixed_size()
        self.strides = list(spec.strides) or list(DEFAULT_STRIDES)
        self.outputs = tuple(f"scores, stride {s}" for s in self.strides) + tuple(
            f"box distribution, stride {s}" for s in self.strides
        )

    def _cells(self) -> list[int]:
        return [rows * columns for rows, columns in grid_cells(self.size, self.strides)]

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        levels = len(self.strides)
        first_score, first_box = shapes[0], shapes[levels] if len(shapes) > levels else ()
        classes = first_score[2] if len(first_score) == 3 and first_score[2] != -1 else ANY
        width = first_box[2] if len(first_box) == 3 and first_box[2] > 0 and first_box[2] % 4 == 0 else 8
        cells = self._cells()
        expected: list[tuple[int | None, ...]] = [(ANY, n, classes) for n in cells]
        return expected + [(ANY, n, width) for n in cells]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        levels = len(self.strides)
        score_maps, box_maps = tensors[:levels], tensors[levels : 2 * levels]
        grids = [grid_points(rows, columns) for rows, columns in grid_cells(self.size, self.strides)]
        threshold = score_threshold
        result = []
        for index in range(len(score_maps[0])):
            boxes, class_scores = [], []
            for stride, grid, score_map, box_map in zip(self.strides, grids, score_maps, box_maps, strict=True):
                scores = activate(score_map[index], self.spec.score_activation)
                keep = np.argsort(scores.max(axis=1), kind="stable")[::-1]
                if self.spec.top_k_per_level:
                    keep = keep[: self.spec.top_k_per_level]
                distances = expected_distances(box_map[index][keep]) * stride
                centres = (grid[keep] + 0.5) * stride
                boxes.append(np.concatenate([centres - distances[:, 0:2], centres + distances[:, 2:4]], axis=1))
                class_scores.append(scores[keep])
            all_scores = np.concatenate(class_scores)
            rows, picked, classes = class_choice(all_scores, self.spec.multi_label, threshold)
            result.append(Candidates(np.concatenate(boxes)[rows], picked, classes))
        return result


def expected_distances(distribution: np.ndarray) -> np.ndarray:
    """(cells, 4 * bins) logits to (cells, 4) distances in bins: softmax expectation per edge."""
    bins = distribution.shape[1] // 4
    logits = distribution.reshape(-1, 4, bins).astype(np.float64)
    weights = np.exp(logits - logits.max(axis=2, keepdims=True))
    weights /= weights.sum(axis=2, keepdims=True)
    return weights @ np.arange(bins, dtype=np.float64)
