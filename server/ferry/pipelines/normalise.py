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
    gain, bias = _gain_bias(spec)
    out = np.empty(shape, dtype=np.float32)
    fill = padding_values(spec)
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


def padding_values(spec: PreprocessSpec) -> np.ndarray:
    """What padding holds in the tensor, per channel (float32; uint8 for a UINT8 tensor): ``pad_value``
    normalised, except for TEXT_LINE, which PaddleOCR pads with zeros after normalising."""
    if spec.datatype == "UINT8":
        return np.full(spec.channels, int(round(spec.pad_value)), dtype=np.uint8)
    gain, bias = _gain_bias(spec)
    return np.zeros_like(bias) if spec.resize == _PRE.TEXT_LINE else np.float32(spec.pad_value) * gain + bias


def pad_to(tensors: list[np.ndarray], spec: PreprocessSpec) -> np.ndarray:
    """Tensors of different sizes stacked into one batch, each padded on the right and bottom to
    the largest height and width among them with ``padding_values`` (``pad_to_batch``)."""
    height = max(t.shape[1] if spec.channels_first else t.shape[0] for t in tensors)
    width = max(t.shape[2] if spec.channels_first else t.shape[1] for t in tensors)
    fill = padding_values(spec).astype(tensors[0].dtype)
    batch = np.empty((len(tensors), *spec.shape_at(height, width)), dtype=tensors[0].dtype)
    batch[...] = fill[:, None, None] if spec.channels_first else fill
    for index, tensor in enumerate(tensors):
        rows, cols = (tensor.shape[1], tensor.shape[2]) if spec.channels_first else tensor.shape[:2]
        _region(batch[index], spec, 0, 0, rows, cols)[...] = tensor
    return batch


def _gain_bias(spec: PreprocessSpec) -> tuple[np.ndarray, np.ndarray]:
    """(scale / std, -mean / std) per channel, float32."""
    std = np.asarray(spec.std, dtype=np.float32)
    return np.float32(spec.scale) / std, -np.asarray(spec.mean, dtype=np.float32) / std


def _region(out: np.ndarray, spec: PreprocessSpec, top: int, left: int, rows: int, cols: int) -> np.ndarray:
    """The view of ``out`` that the resized image occupies."""
    if spec.channels_first:
        return out[:, top : top + rows, left : left + cols]
    return out[top : top + rows, left : left + cols, :]
