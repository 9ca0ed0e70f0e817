"""The resize engine: which library turns the decoded image into the placed size.

OpenCV (``cv2.resize``) does not antialias when shrinking, and Pillow does; the two give different
pixels, and a model only reproduces its reference scores with the library it was trained with
(see ``ResizeEngine`` in ``protos/model_config.proto``). Both release the GIL while resizing.
``resize_alignment: CORNERS`` (MediaPipe) is an OpenCV perspective warp instead of ``cv2.resize``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import cv2
import numpy as np
from PIL import Image

from ferry_client.protocol import model_config_pb2 as mc

from .geometry import ImageTransform, Padding, Placement
from .resize_bounds import crop_only

_PRE = mc.FerryPreprocess

#: FerryPreprocess.Interpolation -> OpenCV flag.
OPENCV_FILTERS: dict[int, int] = {
    _PRE.BILINEAR: cv2.INTER_LINEAR,
    _PRE.NEAREST: cv2.INTER_NEAREST,
    _PRE.BICUBIC: cv2.INTER_CUBIC,
    _PRE.LANCZOS: cv2.INTER_LANCZOS4,
    _PRE.AREA: cv2.INTER_AREA,
}
#: FerryPreprocess.Interpolation -> Pillow filter (AREA is OpenCV's only).
PILLOW_FILTERS: dict[int, Image.Resampling] = {
    _PRE.BILINEAR: Image.Resampling.BILINEAR,
    _PRE.NEAREST: Image.Resampling.NEAREST,
    _PRE.BICUBIC: Image.Resampling.BICUBIC,
    _PRE.LANCZOS: Image.Resampling.LANCZOS,
}
#: Filters each engine implements.
ENGINE_FILTERS: dict[int, Mapping[int, object]] = {_PRE.OPENCV: OPENCV_FILTERS, _PRE.PILLOW: PILLOW_FILTERS}


def pixels_of(image: Image.Image) -> np.ndarray:
    """The image's uint8 pixels as (H, W, C), C being 3 (RGB) or 1 (L)."""
    pixels = np.asarray(image)
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def resize(image: Image.Image, where: Placement, engine: int, interpolation: int, pad_value: int) -> np.ndarray:
    """The region of the image resized as ``where`` says (padded first when it asks) that is kept
    (its crop), as (H, W, C) uint8 pixels.

    ``engine`` is a resolved ``ResizeEngine`` (OPENCV or PILLOW), ``interpolation`` an
    ``Interpolation`` that engine implements, ``pad_value`` the canvas fill of pad-then-resize.
    """
    if where.corners:
        return _warp_corners(pixels_of(image), where.transform, interpolation, pad_value)
    if crop_only(where):
        return _crop_only(image, where, engine, interpolation)
    pixels = _resize_whole(image, where, engine, interpolation, pad_value)
    return pixels[where.crop_top : where.crop_top + where.rows, where.crop_left : where.crop_left + where.cols]


def _resize_whole(image: Image.Image, where: Placement, engine: int, interpolation: int, pad_value: int) -> np.ndarray:
    if engine == _PRE.PILLOW:
        if where.padding is not None:
            image = _pad_pillow(image, where.padding, pad_value)
        if image.size != where.resized:
            image = image.resize(where.resized, PILLOW_FILTERS[interpolation])
        return pixels_of(image)
    pixels = pixels_of(image)
    if where.padding is not None:
        pixels = _pad_opencv(pixels, where.padding, pad_value)
    if (pixels.shape[1], pixels.shape[0]) != where.resized:
        resized = cv2.resize(pixels, where.resized, interpolation=OPENCV_FILTERS[interpolation])
        pixels = resized[:, :, None] if resized.ndim == 2 else resized
    return pixels


def _crop_only(image: Image.Image, where: Placement, engine: int, interpolation: int) -> np.ndarray:
    """The crop of the resized image, computed without the rest of it (``resize_bounds.crop_only``).

    Pillow resizes the crop's source box at the whole resize's scale (its ``box``). OpenCV
    resizes the band of source pixels the crop's filter taps reach, at the whole resize's scale
    factors, and cuts the crop out of that; each axis's band starts where that scale puts its
    first output pixel nearest a whole pixel, so the crop samples the source within a small part
    of a pixel of where the whole resize would (where the whole resize's float coordinates, a
    million rows in, are themselves only within 1/32 of a pixel)."""
    width, height = image.size
    new_w, new_h = where.resized
    if engine == _PRE.PILLOW:
        scale_x, scale_y = width / new_w, height / new_h
        box = (
            where.crop_left * scale_x,
            where.crop_top * scale_y,
            (where.crop_left + where.cols) * scale_x,
            (where.crop_top + where.rows) * scale_y,
        )
        return pixels_of(image.resize((where.cols, where.rows), PILLOW_FILTERS[interpolation], box=box))
    x0, x1, left, right = _band(width, new_w, where.crop_left, where.cols)
    y0, y1, top, below = _band(height, new_h, where.crop_top, where.rows)
    band = pixels_of(image)[y0:y1, x0:x1]
    if below or right:
        band = cv2.copyMakeBorder(band, 0, below, 0, right, cv2.BORDER_REPLICATE)
        band = band[:, :, None] if band.ndim == 2 else band
    resized = cv2.resize(band, None, fx=new_w / width, fy=new_h / height, interpolation=OPENCV_FILTERS[interpolation])
    resized = resized[:, :, None] if resized.ndim == 2 else resized
    return np.ascontiguousarray(resized[top : top + where.rows, left : left + where.cols])


#: Source pixels beyond a sample that OpenCV's widest filter (LANCZOS4, 8 taps) reads, and how
#: many starts of a band are tried to align it with the whole resize's grid.
_TAPS, _ALIGN_TRIES = 4, 256


def _band(source: int, resized: int, first: int, count: int) -> tuple[int, int, int, int]:
    """(start, end) of the source pixels that outputs ``first`` .. ``first + count`` of a
    ``source`` -> ``resized`` resize read, where output ``first`` lies in the band's resize, and
    how many times to repeat the band's last pixel so that its resize reaches output ``first +
    count`` (a band ending with the image; OpenCV reads repeated edge pixels past it anyway)."""
    scale = resized / source
    reach = _TAPS + math.ceil(1 / scale) + 1  # the filter's taps, and an area filter's whole cell
    lowest = max(0, math.floor((first + 0.5) / scale - 0.5) - reach)
    start = min(range(max(0, lowest - _ALIGN_TRIES), lowest + 1), key=lambda s: (abs(s * scale - round(s * scale)), -s))
    end = min(source, math.ceil((first + count - 0.5) / scale - 0.5) + reach + 1)
    offset = first - round(start * scale)
    repeat = 0
    while round((end + repeat - start) * scale) < offset + count:
        repeat += 1
    return start, end, offset, repeat


def _warp_corners(pixels: np.ndarray, transform: ImageTransform, interpolation: int, value: int) -> np.ndarray:
    """MediaPipe's ImageToTensor on the CPU, step for step: the source rectangle (the image widened to
    the input's aspect ratio) as ``cv2.boxPoints`` of an unrotated rect, its corners sent to the
    tensor's corners by ``cv2.getPerspectiveTransform`` and ``cv2.warpPerspective`` with a constant
    border. ``cv2.warpAffine`` with the same map is not byte-identical (OpenCV rounds the two warps'
    coordinates differently), so MediaPipe's own operation is used; which OpenCV versions give
    MediaPipe's pixels is pinned in pyproject.toml and checked by the unit tests."""
    width, height = transform.input_width, transform.input_height
    source_w, source_h = width / transform.scale_x, height / transform.scale_y
    left, top = -transform.offset_x / transform.scale_x, -transform.offset_y / transform.scale_y
    centre = (left + source_w / 2, top + source_h / 2)
    source = cv2.boxPoints((centre, (source_w, source_h), 0.0))  # bottom-left, top-left, top-right, bottom-right
    target = np.array([[0, height], [0, 0], [width, 0], [width, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(source, target)
    border = (value,) * pixels.shape[2]
    warped = cv2.warpPerspective(
        pixels,
        matrix,
        (width, height),
        flags=OPENCV_FILTERS[interpolation],
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=border,
    )
    return warped[:, :, None] if warped.ndim == 2 else warped


def _pad_pillow(image: Image.Image, padding: Padding, value: int) -> Image.Image:
    fill = value if image.mode == "L" else (value,) * len(image.getbands())
    canvas = Image.new(image.mode, (padding.width, padding.height), fill)
    canvas.paste(image, (padding.left, padding.top))
    return canvas


def _pad_opencv(pixels: np.ndarray, padding: Padding, value: int) -> np.ndarray:
    height, width = pixels.shape[:2]
    canvas = np.full((padding.height, padding.width, pixels.shape[2]), value, dtype=np.uint8)
    canvas[padding.top : padding.top + height, padding.left : padding.left + width] = pixels
    return canvas
