"""The resize engine: which library turns the decoded image into the placed size.

OpenCV (``cv2.resize``) does not antialias when shrinking, and Pillow does; the two give different
pixels, and a model only reproduces its reference scores with the library it was trained with
(see ``ResizeEngine`` in ``protos/model_config.proto``). Both release the GIL while resizing.
``resize_alignment: CORNERS`` (MediaPipe) is an OpenCV affine warp instead of ``cv2.resize``.
"""

from __future__ import annotations

from collections.abc import Mapping

import cv2
import numpy as np
from PIL import Image

from ferry_client.protocol import model_config_pb2 as mc

from .geometry import ImageTransform, Padding, Placement

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
    """The image resized as ``where`` says (padded first when it asks), as (H, W, C) uint8 pixels.

    ``engine`` is a resolved ``ResizeEngine`` (OPENCV or PILLOW), ``interpolation`` an
    ``Interpolation`` that engine implements, ``pad_value`` the canvas fill of pad-then-resize.
    """
    if where.corners:
        return _warp_corners(pixels_of(image), where.transform, interpolation, pad_value)
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


def _warp_corners(pixels: np.ndarray, transform: ImageTransform, interpolation: int, value: int) -> np.ndarray:
    """MediaPipe's ImageToTensor: ``input = original * scale + offset`` on pixel indices, so corners map to
    corners; outside the image the constant ``value`` is blended in. It writes the pixels MediaPipe's
    ``cv2.warpPerspective`` does (the unit tests compare them byte for byte), and an axis-aligned map
    needs only the cheaper ``cv2.warpAffine``."""
    matrix = np.array([[transform.scale_x, 0.0, transform.offset_x], [0.0, transform.scale_y, transform.offset_y]])
    size = (transform.input_width, transform.input_height)
    border = (value,) * pixels.shape[2]
    warped = cv2.warpAffine(
        pixels, matrix, size, flags=OPENCV_FILTERS[interpolation], borderMode=cv2.BORDER_CONSTANT, borderValue=border
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
