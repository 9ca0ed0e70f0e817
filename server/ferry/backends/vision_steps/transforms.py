"""``ImageTransform`` as a tensor row, so geometry can travel between ensemble steps (FP64, exact)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, fields

import numpy as np

from ...pipelines.preprocess import ImageTransform

TRANSFORM_WIDTH = len(fields(ImageTransform))  # scale x/y, offset x/y, original w/h, input w/h


def pack(transforms: Sequence[ImageTransform]) -> np.ndarray:
    return np.array([astuple(t) for t in transforms], dtype=np.float64).reshape(len(transforms), TRANSFORM_WIDTH)


def unpack(rows: np.ndarray) -> list[ImageTransform]:
    return [_transform(row) for row in np.asarray(rows, dtype=np.float64).reshape(-1, TRANSFORM_WIDTH)]


def _transform(row: np.ndarray) -> ImageTransform:
    scale_x, scale_y, offset_x, offset_y, original_w, original_h, input_w, input_h = (float(v) for v in row)
    return ImageTransform(
        scale_x, scale_y, offset_x, offset_y, int(original_w), int(original_h), int(input_w), int(input_h)
    )
