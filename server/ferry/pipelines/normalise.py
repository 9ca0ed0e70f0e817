"""Normalise and lay out: placed uint8 pixels to the model input's tensor (colour order, scale,
mean/std, padding, NCHW or NHWC, FP32 / FP16 / UINT8), in a few vectorised numpy operations
writing straight into the output array."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

if TYPE_CHECKING:
    from .preprocess import PreprocessSpec

_PRE = mc.FerryPreprocess


def to_tensor(
    pixels: np.ndarray, spec: PreprocessSpec, *, top: int, left: int, size: tuple[int, int] | None = None
) -> np.ndarray:
    """Write (H', W', C) uint8 pixels at (top, left) into a padded tensor in the spec's layout and type.

    ``size`` (height, width) is the tensor's, for a variable-size input (default: the spec's).
    Normalisation is folded into one multiply-add per channel: (p * scale - mean) / std == p * a + b.
    The padding is ``pad_value`` normalised, except for TEXT_LINE: zeros after normalising (PaddleOCR).
    """
    if spec.color_order == _PRE.BGR:
        pixels = pixels[:, :, ::-1]
    height, width = size or (spec.height, spec.width)
    shape = spec.shape_at(height, width)
    rows, cols = pixels.shape[0], pixels.shape[1]
    padded = rows != height or cols != width
    if spec.datatype == "UINT8":
        out = np.empty(shape, dtype=np.uint8)
        if padded:
            out.fill(int(round(spec.pad_value)))
        _region(out, spec, top, left, rows, cols)[...] = pixels.transpose(2, 0, 1) if spec.channels_first else pixels
        return out
    std = np.asarray(spec.std, dtype=np.float32)
    gain = np.float32(spec.scale) / std
    bias = -np.asarray(spec.mean, dtype=np.float32) / std
    out = np.empty(shape, dtype=np.float32)
    fill = np.zeros_like(bias) if spec.resize == _PRE.TEXT_LINE else np.float32(spec.pad_value) * gain + bias
    if spec.channels_first:
        if padded:
            out[...] = fill[:, None, None]
        region = _region(out, spec, top, left, rows, cols)
        for c in range(spec.channels):
            np.multiply(pixels[:, :, c], gain[c], out=region[c])
            region[c] += bias[c]
    else:
        if padded:
            out[...] = fill
        region = _region(out, spec, top, left, rows, cols)
        np.multiply(pixels, gain, out=region)
        region += bias
    return out if spec.datatype == "FP32" else out.astype(spec.dtype)


def _region(out: np.ndarray, spec: PreprocessSpec, top: int, left: int, rows: int, cols: int) -> np.ndarray:
    """The view of ``out`` that the resized image occupies."""
    if spec.channels_first:
        return out[:, top : top + rows, left : left + cols]
    return out[top : top + rows, left : left + cols, :]
