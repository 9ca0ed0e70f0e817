"""Where an image lands in the model input: resize size, crop, padding, and the mapping back.

Each convention is an explicit option named after the framework it reproduces (centre-crop offset
rounding, rounding of the resized longer side, letterbox placement, pad-then-resize), because a
one-pixel difference in geometry moves a model's scores. The ``ImageTransform`` kept per image
maps detections back to the caller's pixels exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

if TYPE_CHECKING:
    from .preprocess import PreprocessSpec

_PRE = mc.FerryPreprocess


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

    def to_original(self, boxes_xyxy: np.ndarray, clip: bool = True) -> np.ndarray:
        """Map (..., 4) model-input boxes back to original pixels, clipped to the original image
        unless ``clip`` is false (MediaPipe, YOLOX and DETR return boxes running past the edge)."""
        boxes = np.array(boxes_xyxy, dtype=np.float64)
        boxes[..., 0::2] = (boxes[..., 0::2] - self.offset_x) / self.scale_x
        boxes[..., 1::2] = (boxes[..., 1::2] - self.offset_y) / self.scale_y
        if clip:
            boxes[..., 0::2] = np.clip(boxes[..., 0::2], 0.0, self.original_width)
            boxes[..., 1::2] = np.clip(boxes[..., 1::2], 0.0, self.original_height)
        return boxes


@dataclass(frozen=True)
class Padding:
    """Pad-then-resize: the original is first placed at (``left``, ``top``) of a ``width`` x ``height``
    canvas filled with the pad value, and that canvas is what gets resized."""

    width: int
    height: int
    left: int
    top: int


@dataclass(frozen=True)
class Placement:
    """Where one image lands in the tensor: resized to ``resized`` (width, height), the region
    ``rows`` x ``cols`` cut at (``crop_top``, ``crop_left``) of the resized image, written at
    (``top``, ``left``) of the tensor. With ``padding``, the padded canvas is what is resized.
    The CPU and the GPU pre-processing both follow it."""

    resized: tuple[int, int]
    crop_top: int
    crop_left: int
    rows: int
    cols: int
    top: int
    left: int
    transform: ImageTransform
    padding: Padding | None = None
    corners: bool = False  # CORNERS alignment: warp the original onto the tensor by ``transform``


def place(width: int, height: int, spec: PreprocessSpec) -> Placement:
    """The geometry of ``spec.resize`` for an image of ``width`` x ``height``.

    EXACT stretches to the input size ignoring the aspect ratio. SHORTER_SIDE_CENTER_CROP resizes the
    shorter side to ``resize_shorter`` and cuts the centre crop (roundings as the spec says). LETTERBOX
    fits the image inside the input keeping the aspect ratio; the border gets ``pad_value``.
    LIMIT_SIDE and TEXT_LINE follow their modules' rules (``limit_side``, ``text_line``). With
    ``resize_alignment: CORNERS`` the placement is a warp (see ``_corners``).
    """
    if spec.resize_alignment == _PRE.CORNERS:
        return _corners(width, height, spec)
    if spec.resize == _PRE.LIMIT_SIDE:
        from .limit_side import limit_side_placement  # they build on this module's types

        return limit_side_placement(width, height, spec)
    if spec.resize == _PRE.TEXT_LINE:
        from .text_line import text_line_placement

        return text_line_placement(width, height, spec)
    if spec.resize == _PRE.SHORTER_SIDE_CENTER_CROP:
        return _shorter_side_center_crop(width, height, spec)
    if spec.resize == _PRE.LETTERBOX:
        if spec.pad_then_resize:
            return _pad_then_resize(width, height, spec)
        return _resize_then_pad(width, height, spec)
    transform = ImageTransform(
        spec.width / width, spec.height / height, 0.0, 0.0, width, height, spec.width, spec.height
    )
    return Placement((spec.width, spec.height), 0, 0, spec.height, spec.width, 0, 0, transform)


def _shorter_side_center_crop(w: int, h: int, spec: PreprocessSpec) -> Placement:
    shorter = spec.resize_shorter
    if w <= h:
        new_w, new_h = shorter, max(1, _round_side(shorter * h / w, spec.resize_shorter_rounding))
    else:
        new_w, new_h = max(1, _round_side(shorter * w / h, spec.resize_shorter_rounding)), shorter
    left = _crop_offset(new_w - spec.width, spec.crop_rounding)
    top = _crop_offset(new_h - spec.height, spec.crop_rounding)
    transform = ImageTransform(new_w / w, new_h / h, float(-left), float(-top), w, h, spec.width, spec.height)
    return Placement((new_w, new_h), top, left, spec.height, spec.width, 0, 0, transform)


def _round_side(length: float, rounding: int) -> int:
    """SIDE_INT truncates (torchvision's Resize); SIDE_ROUND rounds (PaddleClas, Python's round)."""
    return int(round(length)) if rounding == _PRE.SIDE_ROUND else int(length)


def _crop_offset(excess: int, rounding: int) -> int:
    """CROP_ROUND as torchvision's CenterCrop; CROP_FLOOR as PaddleClas's CropImage."""
    return excess // 2 if rounding == _PRE.CROP_FLOOR else int(round(excess / 2.0))


def _margins(spare_w: int, spare_h: int, corner: bool) -> tuple[int, int]:
    """(left, top) of the content: centred (extra pixel right/bottom) or top-left."""
    return (0, 0) if corner else (spare_w // 2, spare_h // 2)


def _resize_then_pad(w: int, h: int, spec: PreprocessSpec) -> Placement:
    """Ultralytics and YOLOX: resize to fit, then pad to the input size.

    The resized size is rounded (Ultralytics) or truncated (YOLOX) as ``letterbox_rounding`` says;
    boxes map back per axis or by the one gain (``letterbox_mapping``), after subtracting the
    padding as Ultralytics' ``scale_boxes`` recomputes it (``_gain_transform``) or as applied.
    """
    ratio = min(spec.width / w, spec.height / h)
    new_w = min(spec.width, max(1, _letterbox_side(w * ratio, spec.letterbox_rounding)))
    new_h = min(spec.height, max(1, _letterbox_side(h * ratio, spec.letterbox_rounding)))
    left, top = _margins(spec.width - new_w, spec.height - new_h, spec.letterbox_corner)
    if spec.letterbox_mapping == _PRE.LETTERBOX_GAIN:
        transform = _gain_transform(w, h, ratio, spec)
    elif spec.letterbox_mapping == _PRE.LETTERBOX_GAIN_APPLIED_PADDING:
        transform = ImageTransform(ratio, ratio, float(left), float(top), w, h, spec.width, spec.height)
    else:
        transform = ImageTransform(new_w / w, new_h / h, float(left), float(top), w, h, spec.width, spec.height)
    return Placement((new_w, new_h), 0, 0, new_h, new_w, top, left, transform)


def _letterbox_side(length: float, rounding: int) -> int:
    """LETTERBOX_TRUNCATE as YOLOX's preproc (``int()``); LETTERBOX_ROUND as Ultralytics' LetterBox."""
    return int(length) if rounding == _PRE.LETTERBOX_TRUNCATE else round(length)


def _gain_transform(w: int, h: int, gain: float, spec: PreprocessSpec) -> ImageTransform:
    """Ultralytics' ``scale_boxes``: both axes divide by the one gain, after subtracting the padding
    it recomputes as ``round(spare / 2 - 0.1)`` from the unrounded size; top-left placement (YOLOX's
    preproc, Ultralytics with ``center=False``) has no padding to subtract."""
    if spec.letterbox_corner:
        left = top = 0.0
    else:
        left = float(round((spec.width - w * gain) / 2 - 0.1))
        top = float(round((spec.height - h * gain) / 2 - 0.1))
    return ImageTransform(gain, gain, left, top, w, h, spec.width, spec.height)


def _pad_then_resize(w: int, h: int, spec: PreprocessSpec) -> Placement:
    """MediaPipe: pad the original to the input's aspect ratio, then resize the padded image."""
    if w * spec.height >= h * spec.width:  # wider than the input: pad rows
        canvas_w, canvas_h = w, max(h, round(w * spec.height / spec.width))
    else:
        canvas_w, canvas_h = max(w, round(h * spec.width / spec.height)), h
    left, top = _margins(canvas_w - w, canvas_h - h, spec.letterbox_corner)
    scale_x, scale_y = spec.width / canvas_w, spec.height / canvas_h
    transform = ImageTransform(scale_x, scale_y, left * scale_x, top * scale_y, w, h, spec.width, spec.height)
    padding = Padding(canvas_w, canvas_h, left, top)
    return Placement((spec.width, spec.height), 0, 0, spec.height, spec.width, 0, 0, transform, padding)


def _corners(w: int, h: int, spec: PreprocessSpec) -> Placement:
    """MediaPipe's ImageToTensor: the source rectangle's corners go to the tensor's corners.

    EXACT warps the whole image. LETTERBOX (pad-then-resize) widens the image's rectangle to the
    input's aspect ratio by exactly half the spare length on each side (fractional when the spare
    length is odd), or all of it right/bottom with ``letterbox_corner``; nothing is rounded.
    """
    if spec.resize == _PRE.EXACT:
        canvas_w, canvas_h, left, top = float(w), float(h), 0.0, 0.0
    else:
        canvas_w, canvas_h = max(float(w), h * spec.width / spec.height), max(float(h), w * spec.height / spec.width)
        left, top = (0.0, 0.0) if spec.letterbox_corner else ((canvas_w - w) / 2, (canvas_h - h) / 2)
    scale_x, scale_y = spec.width / canvas_w, spec.height / canvas_h
    transform = ImageTransform(scale_x, scale_y, left * scale_x, top * scale_y, w, h, spec.width, spec.height)
    return Placement((spec.width, spec.height), 0, 0, spec.height, spec.width, 0, 0, transform, corners=True)
