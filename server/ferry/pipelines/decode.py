"""Encoded image bytes (JPEG, PNG, WebP, BMP) to an 8-bit RGB Pillow image.

Everything a client can send is untrusted: the pixel limit is checked from the header before any
pixel data is decoded, and every decoder failure becomes an ``InvalidArgument`` naming the image.
Truncated files must fail rather than come back half grey, so this module relies on Pillow's
``ImageFile.LOAD_TRUNCATED_IMAGES`` staying False (it never sets it).

Pillow decodes for both resize engines: on real JPEGs its pixels equal ``cv2.imread``'s (both wheels
bundle libjpeg-turbo; ``tests/unit/test_pipelines_engines.py`` checks it), so OpenCV pipelines are
reproduced while keeping the header-first safety checks above.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from ferry.errors import InvalidArgument

#: Formats accepted, by Pillow's format name.  MPO is how Pillow reports multi-picture JPEGs
#: written by many cameras and phones; it is JPEG for every purpose here.
SUPPORTED_FORMATS: dict[str, str] = {"JPEG": "JPEG", "MPO": "JPEG", "PNG": "PNG", "WEBP": "WebP", "BMP": "BMP"}

#: Colour that transparent pixels are composited onto.  114 grey is the fill YOLO-style
#: letterboxing uses, so transparent areas read as "no content" instead of as black or white.
ALPHA_BACKGROUND: tuple[int, int, int] = (114, 114, 114)

_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
# EXIF orientations that swap width and height (transpose, 90 and 270 degree rotations).
_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})
# Errors Pillow's decoders raise on broken data (UnidentifiedImageError is an OSError too).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error, zlib.error)


def decode_image(
    data: bytes,
    *,
    max_pixels: int,
    target_size: tuple[int, int] | None = None,
    index: int = 0,
) -> Image.Image:
    """Decode one client image to mode "RGB", upright (EXIF orientation applied).

    ``target_size`` is the (width, height) the image will be resized to (in upright orientation);
    large JPEGs are then decoded at a reduced scale in the DCT domain, never below that size.
    ``index`` is the image's position in the request, used in error messages.
    """
    if max_pixels <= 0:
        raise ValueError("max_pixels must be positive")
    if not data:
        raise InvalidArgument(f"image {index}: empty")
    image = _open(data, index)
    display_name = SUPPORTED_FORMATS.get(image.format or "")
    if display_name is None:
        supported = ", ".join(dict.fromkeys(SUPPORTED_FORMATS.values()))
        raise InvalidArgument(f"image {index}: unsupported image format {image.format} (supported: {supported})")
    width, height = image.size
    if width <= 0 or height <= 0:
        raise InvalidArgument(f"image {index}: invalid size {width}x{height}")
    if width * height > max_pixels:
        raise InvalidArgument(
            f"image {index}: {width}x{height} is {width * height} pixels, more than the limit of {max_pixels}"
        )
    if target_size is not None and display_name == "JPEG":
        # JPEG keeps EXIF ahead of the pixel data, so reading it here decodes nothing.
        _request_draft(image, target_size, swap=_orientation(image) in _SWAPPING_ORIENTATIONS)
    try:
        image.load()
    except Image.DecompressionBombError as exc:
        raise InvalidArgument(f"image {index}: too many pixels: {exc}") from None
    except _DECODE_ERRORS as exc:
        raise InvalidArgument(f"image {index}: truncated or corrupt {display_name} data: {exc}") from None
    # Read after load: PNG may keep its EXIF after the pixel data, and asking earlier would decode.
    if _orientation(image) not in (None, 1):
        image = ImageOps.exif_transpose(image)
    return to_rgb(image)


#: Bytes per pixel of what the supported decoders produce, by Pillow mode (others: 4).
_MODE_BYTES = {"1": 1, "L": 1, "P": 1, "LA": 2, "La": 2, "PA": 2, "RGB": 3, "YCbCr": 3, "RGBA": 4, "RGBa": 4, "CMYK": 4}
_MODE_BYTES.update(dict.fromkeys(("I;16", "I;16L", "I;16B", "I;16N"), 2))
#: What a decoder holds besides the image it fills, per pixel, by Pillow format: Pillow's WebP
#: plugin has libwebp decode the whole frame (its own buffers and RGBA), copies it into a bytes
#: object and only then fills the image from those bytes (measured under Pillow 13: 16.4 bytes a
#: pixel in all for an RGB WebP, where 6 were counted and a 39 MP WebP held +600 MB). JPEG, PNG
#: and BMP decode into the image a few rows at a time.
_DECODER_BYTES = {"WEBP": 14}


@dataclass(frozen=True)
class ImageHeader:
    """What an image's header says, read without decoding a pixel."""

    width: int
    height: int
    mode: str
    format: str
    transparent: bool
    #: Whether the decoded image may come out turned by 90 degrees (EXIF orientation 5-8): known
    #: from a JPEG's header; a PNG or WebP may carry its EXIF after the pixels, so it may when it
    #: has an EXIF chunk at all.
    may_swap: bool

    def costliest(self, cost: Callable[[int, int], int]) -> int:
        """The largest ``cost(width, height)`` over the sizes the image may come out at (as stored,
        and turned where it may be). ``cost`` refusing a size (InvalidArgument) rules that size
        out; refusing every size refuses the image, naming the size as stored."""
        sizes = [(self.width, self.height)]
        if self.may_swap and self.width != self.height:
            sizes.append((self.height, self.width))
        costs: list[int] = []
        refusal: InvalidArgument | None = None
        for width, height in sizes:
            try:
                costs.append(cost(width, height))
            except InvalidArgument as exc:
                refusal = refusal or exc
        if not costs:
            assert refusal is not None
            raise refusal
        return max(costs)


#: The chunk that carries EXIF, by format (BMP has none).
_EXIF_CHUNKS = {"PNG": b"eXIf", "WebP": b"EXIF"}


def read_header(data: bytes) -> ImageHeader | None:
    """The header of a supported image, or None when it is unreadable or not supported (decoding
    then refuses it and says why)."""
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        header_format = image.format or ""
        if SUPPORTED_FORMATS.get(header_format) is None:
            return None
        name = SUPPORTED_FORMATS[header_format]
        if name == "JPEG":
            swap = _orientation(image) in _SWAPPING_ORIENTATIONS
        else:  # no EXIF chunk anywhere: nothing can turn it (a chunk found may say nothing)
            swap = _EXIF_CHUNKS.get(name, b"\0") in data
        return ImageHeader(width, height, image.mode, header_format, "transparency" in image.info, swap)
    except Exception:
        return None


#: Pillow modes of JPEGs a device decodes (CMYK and YCCK stay on the CPU: Pillow inverts Adobe CMYK).
_DEVICE_MODES = frozenset({"RGB", "L"})


def device_decodable(header: ImageHeader | None, max_pixels: int) -> bool:
    """Whether ``decode: GPU`` sends this image to the device decoder (a YCbCr or grey JPEG within the
    pixel limit); everything else is decoded by Pillow."""
    return (
        header is not None
        and SUPPORTED_FORMATS.get(header.format) == "JPEG"
        and header.mode in _DEVICE_MODES
        and header.width * header.height <= max_pixels
    )


def decoding_cost(header: ImageHeader) -> int:
    """Bytes decoding the image holds at its peak: the decoded pixels, the decoder's own buffers,
    the 16-bit reduction or the alpha flattening where they apply, the RGB image and the copy
    that turns it upright or into the model's mode."""
    mode = header.mode
    decoded = _MODE_BYTES.get(mode, 4)
    # the decoded pixels, and the copy made to turn them upright (EXIF) or into the model's mode
    per_pixel = decoded + _DECODER_BYTES.get(header.format, 0) + 3
    if mode != "RGB":
        per_pixel += 3  # the RGB conversion
    if mode in _SIXTEEN_BIT_MODES:
        per_pixel += decoded + 2  # the shifted samples, as 8 bits, as an image
    if mode in _ALPHA_MODES or header.transparent:
        per_pixel += 4  # RGBA before flattening
    return max(0, header.width) * max(0, header.height) * per_pixel


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert any mode the supported decoders produce to 8-bit RGB.

    16-bit samples keep their top 8 bits (Pillow's own conversion would clip them at 255), and
    transparency is flattened onto ``ALPHA_BACKGROUND``.
    """
    mode = image.mode
    if mode in _SIXTEEN_BIT_MODES:
        samples = np.asarray(image)
        if mode == "I":  # 32-bit container; the supported formats only put 16-bit values in it
            samples = np.clip(samples, 0, 65535)
        image = Image.fromarray((samples >> 8).astype(np.uint8))  # in the samples' own width: no uint32 copy
        mode = image.mode
    if mode in _ALPHA_MODES or "transparency" in image.info:
        return _flatten_alpha(image)
    if mode == "RGB":
        return image
    return image.convert("RGB")


def _flatten_alpha(image: Image.Image) -> Image.Image:
    """Composite on the neutral background, so hidden colour under transparent pixels never shows."""
    rgba = image if image.mode == "RGBA" else image.convert("RGBA")
    flattened = Image.new("RGB", rgba.size, ALPHA_BACKGROUND)
    flattened.paste(rgba, mask=rgba.getchannel("A"))
    return flattened


def _open(data: bytes, index: int) -> Image.Image:
    """Parse the header only; pixel data is decoded later by ``load``."""
    try:
        return Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise InvalidArgument(f"image {index}: too many pixels: {exc}") from None
    except UnidentifiedImageError:
        sniffed = _sniff_format(data)
        if sniffed is None:
            raise InvalidArgument(f"image {index}: not a recognised image format") from None
        raise InvalidArgument(f"image {index}: truncated or corrupt {sniffed} data: unreadable header") from None
    except _DECODE_ERRORS as exc:
        sniffed = _sniff_format(data) or "image"
        raise InvalidArgument(f"image {index}: truncated or corrupt {sniffed} data: {exc}") from None


def _sniff_format(data: bytes) -> str | None:
    """Name the format from its magic bytes, to tell "corrupt JPEG" from "not an image"."""
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    if data.startswith(b"BM"):
        return "BMP"
    return None


def _orientation(image: Image.Image) -> int | None:
    """The EXIF orientation tag, or None.  A malformed EXIF block is ignored, as browsers do."""
    try:
        value = image.getexif().get(ExifTags.Base.Orientation)
    except Exception:  # any EXIF parsing failure just means "no orientation"
        return None
    return value if isinstance(value, int) else None


def _request_draft(image: Image.Image, target_size: tuple[int, int], *, swap: bool) -> None:
    """Let libjpeg scale down by 1/2, 1/4 or 1/8 while decoding when the image is far larger.

    Pillow picks the largest reduction that keeps both sides at or above the requested size.
    The target is given upright, so it is swapped for images stored rotated by 90 degrees.
    """
    target_w, target_h = target_size
    if swap:
        target_w, target_h = target_h, target_w
    if target_w <= 0 or target_h <= 0:
        return
    width, height = image.size
    if width > 2 * target_w and height > 2 * target_h:
        image.draft("RGB", (target_w, target_h))
