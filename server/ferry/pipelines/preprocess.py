"""One decoded image to one model-input tensor, as a ``FerryPreprocess`` config describes.

``PreprocessSpec`` validates the config against the input it feeds; ``preprocess`` runs the stages,
each in its own module: ``geometry`` (where the image lands), ``resize`` (the engine: OpenCV or
Pillow) and ``normalise`` (colour order, scale, mean/std, layout, type). The ``ImageTransform``
returned alongside records the geometry so detections can be mapped back to the caller's pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ferry.errors import ModelLoadError
from ferry_client.protocol import model_config_pb2 as mc

from .geometry import ImageTransform, Placement, place
from .limit_side import check_limit_side
from .normalise import to_tensor
from .resize import ENGINE_FILTERS, pixels_of, resize
from .text_line import check_text_line

__all__ = ["ImageTransform", "Placement", "PreprocessSpec", "pixels_of", "place", "preprocess", "to_model_mode"]

_PRE = mc.FerryPreprocess
_FIELD = "ferry_image.preprocess"
#: Modes that size each image by a rule (and so accept -1 in the input's height or width).
SIZED_MODES = (_PRE.LIMIT_SIDE, _PRE.TEXT_LINE)
# V2 datatype name -> numpy dtype of the tensors this step can produce.
_DTYPES: dict[str, np.dtype] = {"FP32": np.dtype(np.float32), "FP16": np.dtype(np.float16), "UINT8": np.dtype(np.uint8)}


@dataclass(frozen=True)
class PreprocessSpec:
    """A validated ``FerryPreprocess`` resolved against the model input it feeds."""

    width: int
    height: int
    channels: int  # 3 (RGB/BGR) or 1 (GRAY)
    channels_first: bool  # NCHW when True, NHWC otherwise
    color_order: int  # FerryPreprocess.ColorOrder
    resize: int  # FerryPreprocess.ResizeMode
    interpolation: int  # FerryPreprocess.Interpolation, one the engine implements
    datatype: str  # V2 name of the produced tensor: FP32, FP16 or UINT8
    scale: float
    mean: tuple[float, ...]  # one per channel
    std: tuple[float, ...]  # one per channel
    pad_value: float
    letterbox_corner: bool
    resize_shorter: int  # resolved: never zero for SHORTER_SIDE_CENTER_CROP
    max_pixels: int  # as configured; zero means the server-wide default
    device: int = _PRE.CPU  # FerryPreprocess.Device: where resizing and normalisation run
    decode: int = _PRE.CPU  # FerryPreprocess.Device: where JPEGs are decoded (GPU only with device: GPU)
    engine: int = _PRE.OPENCV  # FerryPreprocess.ResizeEngine, resolved: OPENCV or PILLOW
    crop_rounding: int = _PRE.CROP_ROUND  # FerryPreprocess.CropRounding
    resize_shorter_rounding: int = _PRE.SIDE_INT  # FerryPreprocess.SideRounding
    pad_then_resize: bool = False
    draft_decode: bool = False
    resize_alignment: int = _PRE.PIXEL_CENTERS  # FerryPreprocess.ResizeAlignment
    letterbox_rounding: int = _PRE.LETTERBOX_ROUND  # FerryPreprocess.LetterboxRounding, resolved
    letterbox_mapping: int = _PRE.PER_AXIS  # FerryPreprocess.LetterboxMapping, resolved
    limit_side_len: int = 0  # LIMIT_SIDE
    limit_type: int = _PRE.LIMIT_MIN  # LIMIT_SIDE: FerryPreprocess.LimitType
    size_multiple: int = 32  # LIMIT_SIDE, resolved
    text_line_min_width: int = 0  # TEXT_LINE with a dynamic width, resolved
    text_line_max_width: int = 0  # TEXT_LINE with a dynamic width, resolved
    pad_to_batch: bool = False  # a variable-size input: pad an execution's images to its largest

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.datatype]

    @property
    def variable_size(self) -> bool:
        """Each image gets a tensor of its own size (height or width -1 in the input's dims)."""
        return self.width <= 0 or self.height <= 0

    @property
    def tensor_shape(self) -> tuple[int, int, int]:
        """Shape of one image's tensor (no batch dimension; -1 where it varies per image)."""
        return self.shape_at(self.height, self.width)

    def shape_at(self, height: int, width: int) -> tuple[int, int, int]:
        """Shape of a tensor of ``height`` x ``width`` pixels in the spec's layout."""
        if self.channels_first:
            return (self.channels, height, width)
        return (height, width, self.channels)

    @property
    def decode_size(self) -> tuple[int, int]:
        """Smallest (width, height) the decoder may reduce an image to without losing resolution."""
        if self.resize == _PRE.SHORTER_SIDE_CENTER_CROP:
            return (self.resize_shorter, self.resize_shorter)
        return (self.width, self.height)

    @property
    def draft_size(self) -> tuple[int, int] | None:
        """``decode_image(target_size=...)``: ``decode_size`` with ``draft_decode``, else None (full decode)."""
        return self.decode_size if self.draft_decode else None

    @classmethod
    def from_config(
        cls,
        pre: mc.FerryPreprocess,
        input_dims: Sequence[int],
        input_datatype: str,
        detection_format: int | None = None,
        variable_sizes: bool = True,
    ) -> PreprocessSpec:
        """Validate ``pre`` against the input's dims (batch dim excluded) and V2 (or TYPE_*) datatype.

        ``detection_format`` (a ``FerryDetection.DetectionFormat``, None for other tasks) picks the
        letterbox conventions its reference uses where the config leaves them at their defaults.
        ``variable_sizes``: whether the consumer takes tensors whose size varies per image (a
        model's image input does; an ensemble step's fixed-size output does not)."""
        channels_first = _layout(pre.layout)
        channels, height, width = _image_dims(input_dims, channels_first, pre.resize)
        sized = {
            **check_limit_side(pre, height, width, variable_sizes),
            **check_text_line(pre, height, width, variable_sizes),
        }
        if pre.pad_to_batch and not (pre.resize in SIZED_MODES and (height <= 0 or width <= 0)):
            raise ModelLoadError(
                f"{_FIELD}.pad_to_batch: only applies to a variable-size input (resize: LIMIT_SIDE, or TEXT_LINE "
                "with width -1)"
            )
        sized["pad_to_batch"] = pre.pad_to_batch
        if pre.resize in SIZED_MODES and (pre.device == _PRE.GPU or pre.draft_decode):
            field = "device" if pre.device == _PRE.GPU else "draft_decode"
            raise ModelLoadError(
                f"{_FIELD}.{field}: not available with resize: {_PRE.ResizeMode.Name(pre.resize)}; use device: CPU "
                "and a full decode"
            )
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
        if pre.device not in _PRE.Device.values():
            raise ModelLoadError(f"{_FIELD}.device: unknown value {pre.device}")
        engine = _engine(pre)
        if pre.interpolation not in _PRE.Interpolation.values():
            raise ModelLoadError(f"{_FIELD}.interpolation: unknown value {pre.interpolation}")
        if pre.device == _PRE.GPU:
            _check_device_options(pre)
        _check_decode(pre)
        if pre.interpolation not in ENGINE_FILTERS[engine]:
            name, engine_name = _PRE.Interpolation.Name(pre.interpolation), _PRE.ResizeEngine.Name(engine)
            raise ModelLoadError(
                f"{_FIELD}.interpolation: {name} is not available with resize_engine: {engine_name}; "
                f"use one of {', '.join(_PRE.Interpolation.Name(i) for i in ENGINE_FILTERS[engine])}"
            )
        _check_geometry_options(pre)
        _check_alignment(pre, engine)
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
            interpolation=pre.interpolation,
            datatype=datatype,
            scale=scale,
            mean=mean,
            std=std,
            pad_value=float(pre.pad_value),
            letterbox_corner=pre.letterbox_corner,
            resize_shorter=_resize_shorter(pre, width, height),
            max_pixels=int(pre.max_pixels),
            device=pre.device,
            decode=pre.decode,
            engine=engine,
            crop_rounding=pre.crop_rounding,
            resize_shorter_rounding=pre.resize_shorter_rounding,
            pad_then_resize=pre.pad_then_resize,
            draft_decode=pre.draft_decode,
            resize_alignment=pre.resize_alignment,
            letterbox_rounding=_letterbox_rounding(pre, detection_format),
            letterbox_mapping=_letterbox_mapping(pre, detection_format),
            **sized,
        )


def to_model_mode(image: Image.Image, spec: PreprocessSpec) -> Image.Image:
    """Grayscale or RGB as the spec wants (before resizing: one channel is cheaper to resize)."""
    if spec.color_order == _PRE.GRAY:
        return image if image.mode == "L" else image.convert("L")
    return image if image.mode == "RGB" else image.convert("RGB")


def preprocess(
    image: Image.Image, spec: PreprocessSpec, where: Placement | None = None
) -> tuple[np.ndarray, ImageTransform]:
    """Turn one decoded image into a contiguous tensor of ``spec.tensor_shape`` (or, for a
    variable-size input, the size its rule gives this image) and ``spec.dtype``; ``where`` is
    its placement when the caller has checked it already (``resize_bounds.checked_placement``)."""
    image = to_model_mode(image, spec)
    where = where or place(*image.size, spec)
    pixels = resize(image, where, spec.engine, spec.interpolation, int(round(spec.pad_value)))
    size = (where.transform.input_height, where.transform.input_width)
    return to_tensor(pixels, spec, top=where.top, left=where.left, size=size), where.transform


def _layout(layout: int) -> bool:
    if layout == _PRE.NCHW:
        return True
    if layout == _PRE.NHWC:
        return False
    raise ModelLoadError(f"{_FIELD}.layout: unknown value {layout}")


def _image_dims(dims: Sequence[int], channels_first: bool, resize: int) -> tuple[int, int, int]:
    """(channels, height, width) from the input's dims; height and width must be fixed, except
    for the modes that size each image by a rule (LIMIT_SIDE, TEXT_LINE's width)."""
    if len(dims) != 3:
        raise ModelLoadError(
            f"{_FIELD}: the image input must have 3 dims besides the batch dim (C, H, W or H, W, C; with "
            f"max_batch_size: 0 also 1, C, H, W or a reshape), got {list(dims)}"
        )
    channels, height, width = dims if channels_first else (dims[2], dims[0], dims[1])
    if (height <= 0 or width <= 0) and resize not in SIZED_MODES:
        example = [channels, 640, 640] if channels_first else [640, 640, channels]
        raise ModelLoadError(
            f"{_FIELD}: the image input needs a fixed height and width, got dims {list(dims)}: declare the size "
            f"the model was exported at in the config's input, e.g. dims: {example} for an Ultralytics export "
            "at imgsz=640 (an ONNX file with dynamic height and width serves any size the config declares; "
            "only the OCR resize modes, LIMIT_SIDE and TEXT_LINE, size each image by a rule)"
        )
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


def _engine(pre: mc.FerryPreprocess) -> int:
    """The resize engine ENGINE_DEFAULT stands for: OpenCV on the CPU; on a device, the torch path,
    which follows Pillow's antialiased filters."""
    if pre.resize_engine not in _PRE.ResizeEngine.values():
        raise ModelLoadError(f"{_FIELD}.resize_engine: unknown value {pre.resize_engine}")
    if pre.resize_engine != _PRE.ENGINE_DEFAULT:
        return pre.resize_engine
    return _PRE.PILLOW if pre.device == _PRE.GPU else _PRE.OPENCV


def _check_device_options(pre: mc.FerryPreprocess) -> None:
    """Refuse what the torch device path cannot reproduce, naming the field."""
    if pre.resize_engine == _PRE.OPENCV:
        raise ModelLoadError(
            f"{_FIELD}.resize_engine: OPENCV is not available with device: GPU (the device path resizes like "
            "Pillow, antialiased); use resize_engine: PILLOW or device: CPU"
        )
    if pre.interpolation in (_PRE.LANCZOS, _PRE.AREA):
        raise ModelLoadError(
            f"{_FIELD}.interpolation: {_PRE.Interpolation.Name(pre.interpolation)} is not available with "
            "device: GPU (torch has no such resize); use BILINEAR, BICUBIC or NEAREST"
        )
    if pre.pad_then_resize:
        raise ModelLoadError(f"{_FIELD}.pad_then_resize: not available with device: GPU; use device: CPU")
    if pre.resize_alignment == _PRE.CORNERS:
        raise ModelLoadError(f"{_FIELD}.resize_alignment: CORNERS is not available with device: GPU; use device: CPU")


def _check_decode(pre: mc.FerryPreprocess) -> None:
    """``decode: GPU`` hands the decoded pixels to the device path, which it needs; a draft (DCT-scaled)
    decode is Pillow's alone."""
    if pre.decode not in _PRE.Device.values():
        raise ModelLoadError(f"{_FIELD}.decode: unknown value {pre.decode}")
    if pre.decode == _PRE.GPU and pre.device != _PRE.GPU:
        raise ModelLoadError(f"{_FIELD}.decode: GPU needs device: GPU (the decoded pixels stay on the device)")
    if pre.decode == _PRE.GPU and pre.draft_decode:
        raise ModelLoadError(f"{_FIELD}.draft_decode: not available with decode: GPU (Pillow's reduced decode)")


def _check_geometry_options(pre: mc.FerryPreprocess) -> None:
    """Options that belong to one resize mode are refused elsewhere, so a typo'd mode does not go unnoticed."""
    for field, values in (("crop_rounding", _PRE.CropRounding), ("resize_shorter_rounding", _PRE.SideRounding)):
        value = getattr(pre, field)
        if value not in values.values():
            raise ModelLoadError(f"{_FIELD}.{field}: unknown value {value}")
        if value and pre.resize != _PRE.SHORTER_SIDE_CENTER_CROP:
            raise ModelLoadError(f"{_FIELD}.{field}: only applies to resize: SHORTER_SIDE_CENTER_CROP")
    if pre.pad_then_resize and pre.resize != _PRE.LETTERBOX:
        raise ModelLoadError(f"{_FIELD}.pad_then_resize: only applies to resize: LETTERBOX")
    letterbox_enums = (("letterbox_rounding", _PRE.LetterboxRounding), ("letterbox_mapping", _PRE.LetterboxMapping))
    for field, enum in letterbox_enums:
        value = getattr(pre, field)
        if value not in enum.values():
            raise ModelLoadError(f"{_FIELD}.{field}: unknown value {value}")
        if value and (pre.resize != _PRE.LETTERBOX or pre.pad_then_resize):
            raise ModelLoadError(f"{_FIELD}.{field}: only applies to resize: LETTERBOX without pad_then_resize")


_DET = mc.FerryDetection
#: Detection formats whose references map letterboxed boxes back by the one gain (Ultralytics'
#: scale_boxes for YOLOv5/v8/v10, YOLOX's demo).
_GAIN_FORMATS = (_DET.YOLOV5, _DET.YOLOV8, _DET.YOLOX, _DET.END_TO_END)


def _letterbox_rounding(pre: mc.FerryPreprocess, detection_format: int | None) -> int:
    """The configured rounding, or the detection family's: truncation for YOLOX (its preproc's
    ``int()``), rounding otherwise (Ultralytics' LetterBox)."""
    if pre.letterbox_rounding != _PRE.LETTERBOX_ROUNDING_DEFAULT:
        return pre.letterbox_rounding
    return _PRE.LETTERBOX_TRUNCATE if detection_format == _DET.YOLOX else _PRE.LETTERBOX_ROUND


def _letterbox_mapping(pre: mc.FerryPreprocess, detection_format: int | None) -> int:
    """The configured mapping, or the detection family's (see ``_GAIN_FORMATS``)."""
    if pre.letterbox_mapping != _PRE.LETTERBOX_MAPPING_DEFAULT:
        return pre.letterbox_mapping
    return _PRE.LETTERBOX_GAIN if detection_format in _GAIN_FORMATS else _PRE.PER_AXIS


def _check_alignment(pre: mc.FerryPreprocess, engine: int) -> None:
    """CORNERS is an OpenCV warp of the whole image or of its letterbox rectangle: refuse it elsewhere."""
    if pre.resize_alignment not in _PRE.ResizeAlignment.values():
        raise ModelLoadError(f"{_FIELD}.resize_alignment: unknown value {pre.resize_alignment}")
    if pre.resize_alignment != _PRE.CORNERS:
        return
    if engine != _PRE.OPENCV:
        raise ModelLoadError(
            f"{_FIELD}.resize_alignment: CORNERS needs resize_engine: OPENCV (an OpenCV warp), "
            f"not {_PRE.ResizeEngine.Name(engine)}"
        )
    if pre.interpolation == _PRE.AREA:
        raise ModelLoadError(
            f"{_FIELD}.resize_alignment: CORNERS is not available with interpolation: AREA (OpenCV warps "
            "have no area filter); use BILINEAR, NEAREST, BICUBIC or LANCZOS"
        )
    if not (pre.resize == _PRE.EXACT or (pre.resize == _PRE.LETTERBOX and pre.pad_then_resize)):
        raise ModelLoadError(
            f"{_FIELD}.resize_alignment: CORNERS only applies to resize: EXACT or to resize: LETTERBOX "
            "with pad_then_resize: true"
        )
