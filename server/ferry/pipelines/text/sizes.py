"""Size rules for text models, as PaddleOCR's detector and text-line models compute them.

Each rule reproduces the reference's arithmetic (``int`` truncation, Python's ``round`` with
ties to even, ``math.ceil``), because one pixel more or less changes what the model sees.
"""

from __future__ import annotations

import math
from enum import Enum


class LimitType(Enum):
    """Which side ``limit_side`` constrains."""

    #: Scale up so the shorter side reaches the limit (never down): PP-OCRv4's default (736).
    MIN = "min"
    #: Scale down so the longer side fits the limit (never up): PaddleOCR's older default (960).
    MAX = "max"


def limit_side(width: int, height: int, limit: int, limit_type: LimitType, multiple: int = 32) -> tuple[int, int]:
    """(width, height) a detector input gets: scaled by the limit rule, each side truncated with
    ``int`` and then rounded to the nearest ``multiple`` (ties to even), as PaddleOCR's
    ``DetResizeForTest`` (``limit_type`` min / max). Zero for a side that rounds away."""
    ratio = 1.0
    if limit_type is LimitType.MAX and max(height, width) > limit:
        ratio = float(limit) / (height if height > width else width)
    elif limit_type is LimitType.MIN and min(height, width) < limit:
        ratio = float(limit) / (height if height < width else width)
    return _to_multiple(int(width * ratio), multiple), _to_multiple(int(height * ratio), multiple)


def _to_multiple(side: int, multiple: int) -> int:
    return int(round(side / multiple) * multiple)


def text_line_width(width: int, height: int, target_height: int, tensor_width: int) -> int:
    """Width a text line is resized to before right padding to ``tensor_width``: the aspect ratio
    kept at ``target_height`` (``ceil``), capped at the tensor's width (PaddleOCR's
    ``resize_norm_img`` of the angle classifier and the recogniser)."""
    wanted = math.ceil(target_height * (width / float(height)))
    return tensor_width if wanted > tensor_width else int(wanted)


def recognition_width(ratios: list[float], target_height: int, min_width: int) -> int:
    """Tensor width of one recognition batch: wide enough for its widest line (aspect ratio
    ``width / height``) and at least ``min_width`` (PaddleOCR: ``int(H * max_wh_ratio)``)."""
    widest = max([min_width / target_height, *ratios])
    return int(target_height * widest)
