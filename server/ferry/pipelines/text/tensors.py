"""BGR uint8 images to the tensors PaddleOCR's text models take, with its arithmetic.

The detector normalises ``x * (1/255)`` in float32 then subtracts and divides by float64 mean
and std (0.5), as the reference does; the text-line models work in float32 throughout and pad
the right with zeros after normalising. Both resize with OpenCV's bilinear ``cv2.resize``.
"""

from __future__ import annotations

import cv2
import numpy as np

from .sizes import LimitType, limit_side, text_line_width

_HALF = np.array([0.5, 0.5, 0.5])
_ROWS = 64


def detector_tensor(bgr: np.ndarray, limit: int, limit_type: LimitType, multiple: int = 32) -> np.ndarray | None:
    """(3, H, W) float32 detector input for one image, or None when a side rounds to zero
    (the reference then finds nothing)."""
    height, width = bgr.shape[:2]
    new_width, new_height = limit_side(width, height, limit, limit_type, multiple)
    if new_width <= 0 or new_height <= 0:
        return None
    resized = cv2.resize(bgr, (new_width, new_height))
    tensor = np.empty((3, new_height, new_width), dtype=np.float32)
    # a few rows at a time: the reference's float64 temporaries would hold 48 bytes a pixel at once
    for top in range(0, new_height, _ROWS):
        rows = resized[top : top + _ROWS]
        tensor[:, top : top + _ROWS] = ((rows.astype(np.float32) * (1 / 255.0) - _HALF) / _HALF).transpose(2, 0, 1)
    return tensor


def text_line_tensor(bgr: np.ndarray, target_height: int, tensor_width: int) -> np.ndarray:
    """(3, target_height, tensor_width) float32: the line resized at its aspect ratio (capped at
    the width), scaled to -1..1, zeros to the right."""
    height, width = bgr.shape[:2]
    resized_width = text_line_width(width, height, target_height, tensor_width)
    resized = cv2.resize(bgr, (resized_width, target_height)).astype(np.float32)
    normalised = resized.transpose(2, 0, 1) / 255
    normalised -= 0.5
    normalised /= 0.5
    tensor = np.zeros((3, target_height, tensor_width), dtype=np.float32)
    tensor[:, :, :resized_width] = normalised
    return tensor
