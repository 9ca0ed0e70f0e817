"""Image decoding: every supported format and pixel mode comes back as upright 8-bit RGB, and bad input
fails with a message naming the image and the problem."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFile

from ferry.errors import InvalidArgument
from ferry.pipelines.decode import ALPHA_BACKGROUND, decode_image, to_rgb

LIMIT = 50_000_000


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_chunk(tag: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))


def raw_png(width: int, height: int, bit_depth: int, color_type: int, idat: bytes) -> bytes:
    """A PNG assembled by hand, for headers and bit depths Pillow's encoder will not write."""
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image).astype(np.int32)


def noise(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def gradient(width: int, height: int) -> Image.Image:
    ys, xs = np.mgrid[0:height, 0:width]
    rgb = np.stack([xs * 255 // max(1, width - 1), ys * 255 // max(1, height - 1), (xs + ys) % 256], axis=-1)
    return Image.fromarray(rgb.astype(np.uint8))


def test_truncated_images_are_not_tolerated_globally() -> None:
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


@pytest.mark.parametrize(("fmt", "options"), [("PNG", {}), ("BMP", {}), ("WEBP", {"lossless": True})])
def test_lossless_formats_round_trip_exactly(fmt: str, options: dict[str, object]) -> None:
    original = noise(23, 17)
    decoded = decode_image(encode(original, fmt, **options), max_pixels=LIMIT)
    assert decoded.mode == "RGB"
    assert np.array_equal(pixels(decoded), pixels(original))


def test_jpeg_decodes_close_to_the_original() -> None:
    original = gradient(64, 48)
    decoded = decode_image(encode(original, "JPEG", quality=95), max_pixels=LIMIT)
    assert decoded.mode == "RGB" and decoded.size == (64, 48)
    assert np.abs(pixels(decoded) - pixels(original)).mean() < 3


def test_exif_orientation_6_rotates_clockwise() -> None:
    stored = np.zeros((16, 32, 3), dtype=np.uint8)
    stored[:, :16] = (255, 0, 0)  # left half red
    stored[:, 16:] = (0, 0, 255)  # right half blue
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode(Image.fromarray(stored), "JPEG", quality=95, exif=exif.tobytes())
    decoded = decode_image(data, max_pixels=LIMIT)
    assert decoded.size == (16, 32)  # width and height swapped
    expected = np.rot90(stored, k=-1).astype(np.int32)  # the stored left edge becomes the top
    assert np.abs(pixels(decoded) - expected).mean() < 6
    assert decoded.getpixel((8, 4))[0] > 200 and decoded.getpixel((8, 28))[2] > 200


def test_exif_orientation_8_in_png_is_applied_exactly() -> None:
    stored = np.asarray(noise(12, 7, seed=3))
    exif = Image.Exif()
    exif[0x0112] = 8
    decoded = decode_image(encode(Image.fromarray(stored), "PNG", exif=exif.tobytes()), max_pixels=LIMIT)
    assert np.array_equal(np.asarray(decoded), np.rot90(stored, k=1))  # 90 degrees counter-clockwise


def test_grayscale_becomes_three_equal_channels() -> None:
    gray = np.arange(60, dtype=np.uint8).reshape(6, 10) * 4
    decoded = decode_image(encode(Image.fromarray(gray), "PNG"), max_pixels=LIMIT)
    assert decoded.mode == "RGB"
    assert all(np.array_equal(np.asarray(decoded)[:, :, c], gray) for c in range(3))


@pytest.mark.parametrize("fmt", ["PNG", "BMP"])
def test_one_bit_images_become_black_and_white(fmt: str) -> None:
    checker = (np.indices((8, 8)).sum(axis=0) % 2).astype(bool)
    image = Image.fromarray(checker)
    assert image.mode == "1"
    decoded = decode_image(encode(image, fmt), max_pixels=LIMIT)
    assert np.array_equal(np.asarray(decoded)[:, :, 1], np.where(checker, 255, 0))


def test_palette_with_transparency_uses_the_background() -> None:
    image = Image.new("P", (4, 1))
    image.putpalette([10, 20, 30, 200, 100, 50] + [0] * 762)
    image.putdata([0, 1, 1, 0])
    decoded = decode_image(encode(image, "PNG", transparency=0), max_pixels=LIMIT)
    assert [decoded.getpixel((x, 0)) for x in range(4)] == [
        ALPHA_BACKGROUND,
        (200, 100, 50),
        (200, 100, 50),
        ALPHA_BACKGROUND,
    ]


@pytest.mark.parametrize(("fmt", "options"), [("PNG", {}), ("WEBP", {"lossless": True})])
def test_rgba_is_composited_on_the_background(fmt: str, options: dict[str, object]) -> None:
    alpha = np.array([[0, 64, 128, 255]], dtype=np.uint8)
    rgba = np.zeros((1, 4, 4), dtype=np.uint8)
    rgba[..., 0], rgba[..., 1], rgba[..., 2], rgba[..., 3] = 250, 10, 60, alpha
    decoded = decode_image(encode(Image.fromarray(rgba), fmt, **options), max_pixels=LIMIT)
    weight = alpha[0, :, None] / 255.0
    expected = np.array([250, 10, 60]) * weight + np.array(ALPHA_BACKGROUND) * (1 - weight)
    assert np.abs(pixels(decoded)[0] - expected).max() <= 1


def test_gray_alpha_is_composited_on_the_background() -> None:
    la = Image.merge("LA", (Image.new("L", (2, 1), 200), Image.frombytes("L", (2, 1), bytes([0, 255]))))
    decoded = decode_image(encode(la, "PNG"), max_pixels=LIMIT)
    assert decoded.getpixel((0, 0)) == ALPHA_BACKGROUND
    assert decoded.getpixel((1, 0)) == (200, 200, 200)


def test_cmyk_jpeg_becomes_rgb() -> None:
    data = encode(Image.new("CMYK", (16, 16), (0, 255, 255, 0)), "JPEG", quality=95)
    decoded = decode_image(data, max_pixels=LIMIT)
    assert decoded.mode == "RGB"
    assert np.abs(pixels(decoded) - np.array([255, 0, 0])).max() <= 8


def test_sixteen_bit_gray_png_keeps_the_high_byte() -> None:
    values = np.array([[0, 255, 256, 0x1234, 0xFF00, 65535]], dtype=np.uint16)
    decoded = decode_image(encode(Image.fromarray(values), "PNG"), max_pixels=LIMIT)
    assert np.asarray(decoded)[0, :, 0].tolist() == [0, 0, 1, 0x12, 0xFF, 255]


def test_sixteen_bit_rgb_png_keeps_the_high_byte() -> None:
    samples = [0x0000, 0x01FF, 0x8000, 0x1234, 0xABCD, 0xFFFF]  # two pixels, big-endian 16-bit samples
    row = b"\x00" + b"".join(struct.pack(">H", s) for s in samples)
    decoded = decode_image(raw_png(2, 1, 16, 2, zlib.compress(row)), max_pixels=LIMIT)
    assert np.asarray(decoded).reshape(-1).tolist() == [0x00, 0x01, 0x80, 0x12, 0xAB, 0xFF]


def test_thirty_two_bit_integer_mode_is_scaled_as_sixteen_bit() -> None:
    image = Image.fromarray(np.array([[0, 256, 65535, 70000, -5]], dtype=np.int32))
    assert image.mode == "I"
    assert np.asarray(to_rgb(image))[0, :, 0].tolist() == [0, 1, 255, 255, 0]


def test_large_jpeg_is_decoded_in_draft_mode_but_never_below_the_target() -> None:
    data = encode(Image.new("RGB", (2000, 1600), (10, 200, 30)), "JPEG")
    decoded = decode_image(data, max_pixels=LIMIT, target_size=(224, 224))
    assert decoded.size == (500, 400)  # 1/4 scale: 1/8 would give 250x200, under 224 high
    assert decoded.mode == "RGB"


def test_draft_mode_accounts_for_exif_rotation() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode(Image.new("RGB", (2000, 1000), (10, 200, 30)), "JPEG", exif=exif.tobytes())
    decoded = decode_image(data, max_pixels=LIMIT, target_size=(224, 448))
    assert decoded.size == (250, 500)  # upright 1000x2000 reduced 4x; still >= 224x448


@pytest.mark.parametrize(
    ("size", "fmt", "target"),
    [((1000, 300), "JPEG", (224, 224)), ((2000, 1600), "PNG", (224, 224)), ((2000, 1600), "JPEG", None)],
)
def test_draft_mode_is_not_used_otherwise(size: tuple[int, int], fmt: str, target: tuple[int, int] | None) -> None:
    data = encode(Image.new("RGB", size, (1, 2, 3)), fmt)
    assert decode_image(data, max_pixels=LIMIT, target_size=target).size == size


def test_pixel_limit_is_checked_from_the_header() -> None:
    # 10000x6000 with a bogus IDAT: decoding would fail with "corrupt", so the limit came first.
    # (Pillow's own guard refuses anything over ~179M pixels already at open; see the next test.)
    data = raw_png(10000, 6000, 1, 0, b"not zlib")
    with pytest.raises(InvalidArgument) as info:
        decode_image(data, max_pixels=LIMIT, index=2)
    assert info.value.message == "image 2: 10000x6000 is 60000000 pixels, more than the limit of 50000000"


def test_pillow_decompression_bomb_guard_becomes_invalid_argument() -> None:
    data = raw_png(20000, 20000, 1, 0, b"")
    with pytest.raises(InvalidArgument, match=r"^image 0: too many pixels: Image size \(400000000 pixels\) exceeds"):
        decode_image(data, max_pixels=10**11)


def test_the_limit_is_inclusive() -> None:
    assert decode_image(encode(noise(10, 10), "PNG"), max_pixels=100).size == (10, 10)
    with pytest.raises(InvalidArgument, match="more than the limit of 99"):
        decode_image(encode(noise(10, 10), "PNG"), max_pixels=99)


def test_empty_data() -> None:
    with pytest.raises(InvalidArgument) as info:
        decode_image(b"", max_pixels=LIMIT, index=3)
    assert info.value.message == "image 3: empty"


def test_garbage_data() -> None:
    with pytest.raises(InvalidArgument) as info:
        decode_image(b"this is not an image at all", max_pixels=LIMIT)
    assert info.value.message == "image 0: not a recognised image format"


def test_unsupported_format_is_named() -> None:
    with pytest.raises(InvalidArgument) as info:
        decode_image(encode(noise(4, 4), "GIF"), max_pixels=LIMIT, index=2)
    assert info.value.message == "image 2: unsupported image format GIF (supported: JPEG, PNG, WebP, BMP)"


def test_truncated_jpeg() -> None:
    data = encode(noise(64, 64), "JPEG")
    with pytest.raises(InvalidArgument, match=r"^image 1: truncated or corrupt JPEG data: image file is truncated"):
        decode_image(data[: len(data) // 2], max_pixels=LIMIT, index=1)


@pytest.mark.parametrize("length", [4, 30])
def test_jpeg_cut_inside_the_header(length: int) -> None:
    data = encode(noise(64, 64), "JPEG")
    with pytest.raises(InvalidArgument, match=r"^image 0: truncated or corrupt JPEG data: "):
        decode_image(data[:length], max_pixels=LIMIT)


def test_truncated_png() -> None:
    data = encode(noise(64, 64), "PNG")
    with pytest.raises(InvalidArgument, match=r"^image 0: truncated or corrupt PNG data: "):
        decode_image(data[: len(data) // 2], max_pixels=LIMIT)


def test_corrupt_png_pixel_data() -> None:
    with pytest.raises(InvalidArgument, match=r"^image 5: truncated or corrupt PNG data: "):
        decode_image(raw_png(8, 8, 8, 2, b"\x78\x9c garbage that is not deflate"), max_pixels=LIMIT, index=5)
