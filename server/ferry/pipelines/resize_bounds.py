"""What resizing one image will hold, known from its size before a pixel of it is decoded.

The resize makes images before the tensor: the padded canvas of pad-then-resize, and the resized
image, of which only a crop may be kept (``SHORTER_SIDE_CENTER_CROP``). Their size follows from
the image's and the model input's, not from the bytes sent: a 93-byte 1 x 4000 PNG resized so its
shorter side is 256 is 256 x 1,024,000 pixels (786 MB), a thin page under ``LIMIT_SIDE`` far more.
So where only a small crop of a much larger resized image is kept, only the crop is computed
(``crop_only``); every image the resize still makes is bounded by the pipeline's ``max_pixels``,
the decoded image's own limit (``checked_placement``: 400 naming it, before decoding when the
header tells the size); and what remains is counted in admission (``resize_cost``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ferry.errors import InvalidArgument
from ferry_client.protocol import model_config_pb2 as mc

from .decode import ImageHeader, decoding_cost, device_decodable, read_header
from .geometry import Placement, place

if TYPE_CHECKING:
    from .preprocess import PreprocessSpec

_PRE = mc.FerryPreprocess
#: The resized image is made whole when it holds at most this many times the crop kept from it
#: (every image of an aspect ratio up to ~14:1 at ImageNet's 256/224, so their pixels stay those
#: of resize-then-crop); past it only the crop's region is resized (``resize._crop_only``).
CROP_ONLY_FACTOR = 16
#: Bytes a float32 sample takes: the tensor is built in float32 before any FP16 cast.
_FLOAT_BYTES = 4


def crop_only(where: Placement) -> bool:
    """Whether the CPU resize computes only the kept crop of a resized image far larger than it."""
    if where.padding is not None or where.corners:
        return False
    width, height = where.resized
    return width * height > CROP_ONLY_FACTOR * where.rows * where.cols


def made_pixels(where: Placement, on_device: bool) -> int:
    """Pixels of the largest image the resize makes: the padded canvas, the resized image (only
    its crop where ``crop_only``; the device path resizes whole), the tensor's."""
    transform = where.transform
    sizes = [where.rows * where.cols, transform.input_width * transform.input_height]
    if where.padding is not None:
        sizes.append(where.padding.width * where.padding.height)
    if not where.corners and (on_device or not crop_only(where)):
        sizes.append(where.resized[0] * where.resized[1])
    return max(sizes)


def checked_placement(width: int, height: int, spec: PreprocessSpec, max_pixels: int, index: int) -> Placement:
    """``place``'s geometry for a ``width`` x ``height`` image, refused (400) when an image the
    resize makes would pass ``max_pixels``."""
    try:
        where = place(width, height, spec)
    except InvalidArgument as exc:
        raise InvalidArgument(f"image {index}: {exc.message}") from None
    pixels = made_pixels(where, spec.device == _PRE.GPU)
    if pixels > max_pixels:
        mode = _PRE.ResizeMode.Name(spec.resize)
        raise InvalidArgument(
            f"image {index}: resizing the {width}x{height} image for the model's input (resize: {mode}) makes "
            f"{pixels} pixels, more than the limit of {max_pixels} (max_pixels)"
        )
    return where


def resize_cost(where: Placement, spec: PreprocessSpec) -> int:
    """Bytes pre-processing one image holds besides its decoded pixels: the images the resize
    makes (canvas, resized image or crop) and the tensor, built in float32."""
    uint8 = where.rows * where.cols
    if where.padding is not None:
        uint8 += where.padding.width * where.padding.height
    if not where.corners and not crop_only(where):
        uint8 += where.resized[0] * where.resized[1]
    transform = where.transform
    tensor = math.prod(spec.shape_at(transform.input_height, transform.input_width))
    return uint8 * spec.channels + tensor * max(_FLOAT_BYTES, np.dtype(spec.dtype).itemsize)


def tensor_bytes(where: Placement, spec: PreprocessSpec) -> int:
    """Bytes of the image's tensor in the batch."""
    transform = where.transform
    return math.prod(spec.shape_at(transform.input_height, transform.input_width)) * np.dtype(spec.dtype).itemsize


def image_cost(data: bytes, spec: PreprocessSpec, max_pixels: int, index: int) -> tuple[int, int]:
    """(peak, tensor): bytes decoding and pre-processing the image holds at its peak, and its
    tensor's, from its header alone (0, 0 for an image decoding refuses: it says why). Refused
    here (400) when every way the image may come out (turned by its EXIF or not) resizes past
    ``max_pixels``; a way it may not come out is checked again once decoded."""
    return _header_cost(read_header(data), spec, max_pixels, index)


def _header_cost(header: ImageHeader | None, spec: PreprocessSpec, max_pixels: int, index: int) -> tuple[int, int]:
    if header is None or not 0 < header.width * header.height <= max_pixels:
        return 0, 0
    tensors: list[int] = []

    def cost(width: int, height: int) -> int:
        where = checked_placement(width, height, spec, max_pixels, index)
        tensors.append(tensor_bytes(where, spec))
        return resize_cost(where, spec)

    return decoding_cost(header) + header.costliest(cost), max(tensors)


def device_image_cost(
    image: bytes | np.ndarray, spec: PreprocessSpec, max_pixels: int, index: int
) -> tuple[int, int, int, int]:
    """``image_cost`` on the device path (``preprocess { device: GPU }``), with the image's decoded
    pixels in host memory: (peak, tensor, pixels, decoded here). ``pixels``: what the device's
    upload buffer holds of it (none for a JPEG the device decodes, ``decode: GPU``); ``decoded
    here``: the same, for an image this process decodes (its pixels then wait for the device),
    none for pixels an intake decoded and handed over (``handed_images``: counted by the intake,
    whose block they are read from), which take no decoding either."""
    if isinstance(image, np.ndarray) and image.ndim == 3:
        height, width = image.shape[:2]
        where = checked_placement(width, height, spec, max_pixels, index)
        return 0, tensor_bytes(where, spec), image.nbytes, 0
    header = read_header(bytes(image))
    peak, tensor = _header_cost(header, spec, max_pixels, index)
    if not peak or (spec.decode == _PRE.GPU and device_decodable(header, max_pixels)):
        return peak, tensor, 0, 0  # decoding refuses it, or the device decodes it
    assert header is not None
    pixels = header.width * header.height * spec.channels
    return peak, tensor, pixels, pixels
