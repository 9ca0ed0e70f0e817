"""One decoded image to one model-input tensor, as a ``FerryPreprocess`` config describes.

The image is resized once by Pillow (in C); colour reordering, normalisation, padding and layout
are then a few vectorised numpy operations writing straight into the output array.  The
``ImageTransform`` returned alongside records the geometry so detections can be mapped back to
the caller's pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ferry.errors import ModelLoadError
from ferry_client.protocol import model_config_pb2 as mc

_PRE = mc.FerryPreprocess
_FIELD = "ferry_image.preprocess"

_RESAMPLE = {
    _PRE.BILINEAR: Image.Resampling.BILINEAR,
    _PRE.NEAREST: Image.Resampling.NEAREST,
    _PRE.BICUBIC: Image.Resampling.BICUBIC,
    _PRE.LANCZOS: Image.Resampling.LANCZOS,
}
# V2 datatype name -> numpy dtype of the tensors this step can produce.
_DTYPES = {"FP32": np.dtype(np.float32), "FP16": np.dtype(np.float16), "UINT8": np.dtype(np.uint8)}


@dataclass(frozen=True)
class ImageTransform:
    """How original pixel coordinates map to model-input coordinates: ``input = original * scale + offset``.

    Coordinates are continuous (pixel edges), so a box (0, 0, w, h) covers the whole image.
    """

    scale_x: float
    scale_y: float
    offset_x: float
    offset_y: float
    original_width: int
    original_height: int
    input_width: int
    input_height: int

    def to_input(self, boxes_xyxy: np.ndarray) -> np.ndarray:
        """Map (..., 4) x1, y1, x2, y2 boxes from original pixels to model-input pixels."""
        boxes = np.array(boxes_xyxy, dtype=np.float64)
        boxes[..., 0::2] = boxes[..., 0::2] * self.scale_x + self.offset_x
        boxes[..., 1::2] = boxes[..., 1::2] * self.scale_y + self.offset_y
        return boxes

    def to_original(self, boxes_xyxy: np.ndarray) -> np.ndarray:
        """Map (..., 4) model-input boxes back to original pixels, clipped to the original image."""
        boxes = np.array(boxes_xyxy, dtype=np.float64)
        boxes[..., 0::2] = np.clip((boxes[..., 0::2] - self.offset_x) / self.scale_x, 0.0, self.original_width)
        boxes[..., 1::2] = np.clip((boxes[..., 1::2] - self.offset_y) / self.scale_y, 0.0, self.original_height)
        return boxes


@dataclass(frozen=True)
class PreprocessSpec:
    """A validated ``FerryPreprocess`` resolved against the model input it feeds."""

    width: int
    height: int
    channels: int  # 3 (RGB/BGR) or 1 (GRAY)
    channels_first: bool  # NCHW when True, NHWC otherwise
    color_order: int  # FerryPreprocess.ColorOrder
    resize: int  # FerryPreprocess.ResizeMode
    resample: Image.Resampling
    datatype: str  # V2 name of the produced tensor: FP32, FP16 or UINT8
    scale: float
    mean: tuple[float, ...]  # one per channel
    std: tuple[float, ...]  # one per channel
    pad_value: float
    letterbox_corner: bool
    resize_shorter: int  # resolved: never zero for SHORTER_SIDE_CENTER_CROP
    max_pixels: int  # as configured; zero means the server-wide default
    device: int = _PRE.CPU  # FerryPreprocess.Device: where resizing and normalisation run

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.datatype]

    @property
    def tensor_shape(self) -> tuple[int, int, int]:
        """Shape of one image's tensor (no batch dimension)."""
        if self.channels_first:
            return (self.channels, self.height, self.width)
        return (self.height, self.width, self.channels)

    @property
    def decode_size(self) -> tuple[int, int]:
        """Smallest (width, height) the decoder may reduce an image to without losing resolution.

        Pass it as ``decode_image(target_size=...)``.
        """
        if self.resize == _PRE.SHORTER_SIDE_CENTER_CROP:
            return (self.resize_shorter, self.resize_shorter)
        return (self.width, self.height)

    @classmethod
    def from_config(cls, pre: mc.FerryPreprocess, input_dims: Sequence[int], input_datatype: str) -> PreprocessSpec:
        """Validate ``pre`` against the input's dims (batch dim excluded) and V2 (or TYPE_*) datatype."""
        channels_first = _layout(pre.layout)
        channels, height, width = _image_dims(input_dims, channels_first)
        expected_channels = 1 if pre.color_order == _PRE.GRAY else 3
        if pre.color_order not in _PRE.ColorOrder.values():
            raise ModelLoadError(f"{_FIELD}.color_order: unknown value {pre.color_order}")
        if channels not in (-1, expected_channels):
            order = _PRE.ColorOrder.Name(pre.color_order)
            raise ModelLoadError(
                f"{_FIELD}.color_order: {order} gives {expected_channels} channel(s) "
                f"but the input has {channels} (dims {list(input_dims)}, layout {_PRE.Layout.Name(pre.layout)})"
            )
        if pre.resize not in _PRE.ResizeMode.values():
            raise ModelLoadError(f"{_FIELD}.resize: unknown value {pre.resize}")
        if pre.interpolation not in _RESAMPLE:
            raise ModelLoadError(f"{_FIELD}.interpolation: unknown value {pre.interpolation}")
        if pre.device not in _PRE.Device.values():
            raise ModelLoadError(f"{_FIELD}.device: unknown value {pre.device}")
        if pre.device == _PRE.GPU and pre.interpolation == _PRE.LANCZOS:
            raise ModelLoadError(
                f"{_FIELD}.interpolation: LANCZOS is not available with device: GPU "
                "(torch has no Lanczos resize); use BILINEAR, BICUBIC or NEAREST"
            )
        datatype = _datatype(pre.data_type, input_datatype)
        scale = _scale(pre, datatype)
        mean = _per_channel("mean", list(pre.mean), expected_channels, 0.0, datatype)
        std = _per_channel("std", list(pre.std), expected_channels, 1.0, datatype)
        if any(value == 0.0 for value in std):
            raise ModelLoadError(f"{_FIELD}.std: values must be non-zero, got {list(pre.std)}")
        if not (np.isfinite(pre.pad_value) and 0.0 <= pre.pad_value <= 255.0):
            raise ModelLoadError(f"{_FIELD}.pad_value: must be within 0..255, got {pre.pad_value}")
        return cls(
            width=width,
            height=height,
            channels=expected_channels,
            channels_first=channels_first,
            color_order=pre.color_order,
            resize=pre.resize,
            resample=_RESAMPLE[pre.interpolation],
            datatype=datatype,
            scale=scale,
            mean=mean,
            std=std,
            pad_value=float(pre.pad_value),
            letterbox_corner=pre.letterbox_corner,
            resize_shorter=_resize_shorter(pre, width, height),
            max_pixels=int(pre.max_pixels),
            device=pre.device,
        )


@dataclass(frozen=True)
class Placement:
    """Where one image lands in the tensor: resized to ``resized`` (width, height), the region
    ``rows`` x ``cols`` cut at (``crop_top``, ``crop_left``) of the resized image, written at
    (``top``, ``left``) of the tensor. The CPU and the GPU pre-processing both follow it."""

    resized: tuple[int, int]
    crop_top: int
    crop_left: int
    rows: int
    cols: int
    top: int
    left: int
    transform: ImageTransform


def place(width: int, height: int, spec: PreprocessSpec) -> Placement:
    """The geometry of ``spec.resize`` for an image of ``width`` x ``height``.

    EXACT stretches to the input size ignoring the aspect ratio. SHORTER_SIDE_CENTER_CROP resizes the
    shorter side to ``resize_shorter`` (truncating the longer one, as torchvision's Resize does), then
    cuts the centre crop with torchvision CenterCrop's rounding. LETTERBOX fits the image inside the
    input keeping the aspect ratio; the border gets ``pad_value``.
    """
    w, h = width, height
    if spec.resize == _PRE.SHORTER_SIDE_CENTER_CROP:
        shorter = spec.resize_shorter
        if w <= h:
            new_w, new_h = shorter, max(1, int(shorter * h / w))
        else:
            new_w, new_h = max(1, int(shorter * w / h)), shorter
        left = int(round((new_w - spec.width) / 2.0))
        top = int(round((new_h - spec.height) / 2.0))
        transform = ImageTransform(new_w / w, new_h / h, float(-left), float(-top), w, h, spec.width, spec.height)
        return Placement((new_w, new_h), top, left, spec.height, spec.width, 0, 0, transform)
    if spec.resize == _PRE.LETTERBOX:
        ratio = min(spec.width / w, spec.height / h)
        new_w = min(spec.width, max(1, round(w * ratio)))
        new_h = min(spec.height, max(1, round(h * ratio)))
        if spec.letterbox_corner:
            left = top = 0
        else:
            left, top = (spec.width - new_w) // 2, (spec.height - new_h) // 2
        transform = ImageTransform(new_w / w, new_h / h, float(left), float(top), w, h, spec.width, spec.height)
        return Placement((new_w, new_h), 0, 0, new_h, new_w, top, left, transform)
    transform = ImageTransform(spec.width / w, spec.height / h, 0.0, 0.0, w, h, spec.width, spec.height)
    return Placement((spec.width, spec.height), 0, 0, spec.height, spec.width, 0, 0, transform)


def to_model_mode(image: Image.Image, spec: PreprocessSpec) -> Image.Image:
    """Grayscale or RGB as the spec wants (before resizing: one channel is cheaper to resize)."""
    if spec.color_order == _PRE.GRAY:
        return image if image.mode == "L" else image.convert("L")
    return image if image.mode == "RGB" else image.convert("RGB")


def preprocess(image: Image.Image, spec: PreprocessSpec) -> tuple[np.ndarray, ImageTransform]:
    """Turn one decoded image into a contiguous tensor of ``spec.tensor_shape`` and ``spec.dtype``."""
    image = to_model_mode(image, spec)
    where = place(*image.size, spec)
    pixels = pixels_of(_resize(image, where.resized, spec))
    pixels = pixels[where.crop_top : where.crop_top + where.rows, where.crop_left : where.crop_left + where.cols]
    return _to_tensor(pixels, spec, top=where.top, left=where.left), where.transform


def _resize(image: Image.Image, size: tuple[int, int], spec: PreprocessSpec) -> Image.Image:
    return image if image.size == size else image.resize(size, spec.resample)


def pixels_of(image: Image.Image) -> np.ndarray:
    """The image's uint8 pixels as (H, W, C), C being 3 (RGB) or 1 (L)."""
    pixels = np.asarray(image)
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def _to_tensor(pixels: np.ndarray, spec: PreprocessSpec, *, top: int, left: int) -> np.ndarray:
    """Write (H', W', C) uint8 pixels at (top, left) into a padded tensor in the spec's layout and type.

    Normalisation is folded into one multiply-add per channel: (p * scale - mean) / std == p * a + b.
    """
    if spec.color_order == _PRE.BGR:
        pixels = pixels[:, :, ::-1]
    rows, cols = pixels.shape[0], pixels.shape[1]
    padded = rows != spec.height or cols != spec.width
    if spec.datatype == "UINT8":
        out = np.empty(spec.tensor_shape, dtype=np.uint8)
        if padded:
            out.fill(int(round(spec.pad_value)))
        _region(out, spec, top, left, rows, cols)[...] = pixels.transpose(2, 0, 1) if spec.channels_first else pixels
        return out
    std = np.asarray(spec.std, dtype=np.float32)
    gain = np.float32(spec.scale) / std
    bias = -np.asarray(spec.mean, dtype=np.float32) / std
    out = np.empty(spec.tensor_shape, dtype=np.float32)
    if spec.channels_first:
        if padded:
            out[...] = (np.float32(spec.pad_value) * gain + bias)[:, None, None]
        region = _region(out, spec, top, left, rows, cols)
        for c in range(spec.channels):
            np.multiply(pixels[:, :, c], gain[c], out=region[c])
            region[c] += bias[c]
    else:
        if padded:
            out[...] = np.float32(spec.pad_value) * gain + bias
        region = _region(out, spec, top, left, rows, cols)
        np.multiply(pixels, gain, out=region)
        region += bias
    return out if spec.datatype == "FP32" else out.astype(spec.dtype)


def _region(out: np.ndarray, spec: PreprocessSpec, top: int, left: int, rows: int, cols: int) -> np.ndarray:
    """The view of ``out`` that the resized image occupies."""
    if spec.channels_first:
        return out[:, top : top + rows, left : left + cols]
    return out[top : top + rows, left : left + cols, :]


def _layout(layout: int) -> bool:
    if layout == _PRE.NCHW:
        return True
    if layout == _PRE.NHWC:
        return False
    raise ModelLoadError(f"{_FIELD}.layout: unknown value {layout}")


def _image_dims(dims: Sequence[int], channels_first: bool) -> tuple[int, int, int]:
    """(channels, height, width) from the input's dims; height and width must be fixed."""
    if len(dims) != 3:
        raise ModelLoadError(
            f"{_FIELD}: the image input must have 3 dims besides the batch dim (C, H, W or H, W, C), got {list(dims)}"
        )
    channels, height, width = dims if channels_first else (dims[2], dims[0], dims[1])
    if height <= 0 or width <= 0:
        raise ModelLoadError(f"{_FIELD}: the image input needs a fixed height and width, got dims {list(dims)}")
    return int(channels), int(height), int(width)


def _datatype(data_type: int, input_datatype: str) -> str:
    """The produced tensor's V2 datatype; it must be what the model input takes."""
    model_type = input_datatype.removeprefix("TYPE_") if input_datatype else ""
    if data_type == mc.TYPE_INVALID:
        if model_type not in _DTYPES:
            raise ModelLoadError(
                f"{_FIELD}.data_type: the image input's type {input_datatype or '(unknown)'} cannot be produced; "
                "the input must be TYPE_FP32, TYPE_FP16 or TYPE_UINT8"
            )
        return model_type
    name = mc.DataType.Name(data_type) if data_type in mc.DataType.values() else str(data_type)
    chosen = name.removeprefix("TYPE_")
    if chosen not in _DTYPES:
        raise ModelLoadError(f"{_FIELD}.data_type: {name} is not supported; use TYPE_FP32, TYPE_FP16 or TYPE_UINT8")
    if model_type and chosen != model_type:
        raise ModelLoadError(f"{_FIELD}.data_type: {name} does not match the image input's type TYPE_{model_type}")
    return chosen


def _scale(pre: mc.FerryPreprocess, datatype: str) -> float:
    if datatype == "UINT8":
        if pre.scale != 0.0:
            raise ModelLoadError(f"{_FIELD}.scale: has no effect with a UINT8 tensor (raw pixels), got {pre.scale}")
        return 1.0
    if not np.isfinite(pre.scale):
        raise ModelLoadError(f"{_FIELD}.scale: must be finite, got {pre.scale}")
    return 1.0 / 255.0 if pre.scale == 0.0 else float(pre.scale)


def _per_channel(field: str, values: list[float], channels: int, default: float, datatype: str) -> tuple[float, ...]:
    """Broadcast an empty or one-value list to every channel; otherwise one value per channel."""
    if values and datatype == "UINT8":
        raise ModelLoadError(f"{_FIELD}.{field}: has no effect with a UINT8 tensor (raw pixels), got {values}")
    if not all(np.isfinite(values)):
        raise ModelLoadError(f"{_FIELD}.{field}: values must be finite, got {values}")
    if not values:
        return (default,) * channels
    if len(values) == 1:
        return (float(values[0]),) * channels
    if len(values) != channels:
        raise ModelLoadError(f"{_FIELD}.{field}: has {len(values)} values; expected 1 or {channels} (one per channel)")
    return tuple(float(v) for v in values)


def _resize_shorter(pre: mc.FerryPreprocess, width: int, height: int) -> int:
    """Shorter-side length before the crop; zero means crop * 256 / 224 (the ImageNet convention)."""
    if pre.resize != _PRE.SHORTER_SIDE_CENTER_CROP:
        return int(pre.resize_shorter)
    crop = max(width, height)
    if pre.resize_shorter == 0:
        return int(round(crop * 256 / 224))
    if pre.resize_shorter < crop:
        raise ModelLoadError(f"{_FIELD}.resize_shorter: {pre.resize_shorter} is smaller than the {width}x{height} crop")
    return int(pre.resize_shorter)
