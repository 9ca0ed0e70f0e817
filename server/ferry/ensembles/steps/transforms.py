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
    kinds = [f.type for f in fields(ImageTransform)]
    return [
        ImageTransform(*(int(v) if kind in ("int", int) else float(v) for v, kind in zip(row, kinds, strict=True)))
        for row in np.asarray(rows, dtype=np.float64).reshape(-1, TRANSFORM_WIDTH)
    ]
