"""Resizes whose size is in the image's shape, not in its bytes (issue 38, item 4): a thin image
resized so its shorter side reaches the crop's keeps only a crop of a huge resized image, which is
computed alone (within two grey levels of resize-then-crop; normal images keep the whole resize's
exact pixels), and an image the resize would make past ``max_pixels`` is refused naming the limit,
from its header, with the cost counted from the header too."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest
from PIL import Image, ImageFilter

from ferry.errors import InvalidArgument
from ferry.pipelines import resize
from ferry.pipelines.preprocess import PreprocessSpec, place, preprocess
from ferry.pipelines.resize_bounds import checked_placement, crop_only, image_cost
from ferry_client.protocol import model_config_pb2 as mc

_PRE = mc.FerryPreprocess
MIB = 2**20


def _crop_spec(engine: int, interpolation: int) -> PreprocessSpec:
    pre = _PRE(
        resize=_PRE.SHORTER_SIDE_CENTER_CROP,
        resize_shorter=256,
        resize_engine=engine,
        interpolation=interpolation,
        resize_shorter_rounding=_PRE.SIDE_ROUND,
        crop_rounding=_PRE.CROP_FLOOR,
    )
    return PreprocessSpec.from_config(pre, [3, 224, 224], "FP32")


def _blurred_noise(width: int, height: int) -> Image.Image:
    pixels = np.random.default_rng(width * height).integers(0, 255, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels).filter(ImageFilter.GaussianBlur(2))


@pytest.mark.parametrize(
    ("engine", "interpolation"),
    [
        (_PRE.OPENCV, _PRE.LANCZOS),
        (_PRE.OPENCV, _PRE.BILINEAR),
        (_PRE.OPENCV, _PRE.AREA),
        (_PRE.PILLOW, _PRE.BICUBIC),
        (_PRE.PILLOW, _PRE.NEAREST),
    ],
)
@pytest.mark.parametrize("size", [(40, 1200), (1200, 40), (7, 900), (333, 9001)])
def test_the_crop_alone_is_the_whole_resizes_crop(engine: int, interpolation: int, size: tuple[int, int]) -> None:
    image = _blurred_noise(*size)
    where = place(*image.size, _crop_spec(engine, interpolation))
    assert crop_only(where)
    alone = resize.resize(image, where, engine, interpolation, 0)
    whole = resize._resize_whole(image, where, engine, interpolation, 0)
    whole = whole[where.crop_top : where.crop_top + where.rows, where.crop_left : where.crop_left + where.cols]
    assert alone.shape == whole.shape == (224, 224, 3)
    assert np.abs(alone.astype(int) - whole.astype(int)).max() <= 2


def test_a_normal_image_is_resized_whole() -> None:
    where = place(1600, 900, _crop_spec(_PRE.OPENCV, _PRE.LANCZOS))
    assert not crop_only(where)  # its pixels stay exactly resize-then-crop's


def test_a_thin_image_never_holds_its_whole_resize() -> None:
    # 1 x 600 -> 256 x 153,600 resized (118 MB); the crop kept is 224 x 224
    image = Image.new("RGB", (1, 600), (90, 90, 90))
    tracemalloc.start()
    try:
        tensor, _ = preprocess(image, _crop_spec(_PRE.OPENCV, _PRE.LANCZOS))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tensor.shape == (3, 224, 224)
    assert peak < 4 * MIB, peak


def _limit_side_spec() -> PreprocessSpec:
    pre = _PRE(resize=_PRE.LIMIT_SIDE, limit_side_len=736, limit_type=_PRE.LIMIT_MIN)
    return PreprocessSpec.from_config(pre, [3, -1, -1], "FP32")


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (255, 255, 255)).save(out, format="PNG")
    return out.getvalue()


def test_a_resize_past_max_pixels_is_refused_from_the_header_naming_the_limit() -> None:
    # 8 x 2000 under LIMIT_SIDE 736 (min): 736 x 184,000 pixels
    spec = _limit_side_spec()
    with pytest.raises(InvalidArgument, match=r"image 3: .*8x2000.*135424000 pixels, more than the limit of 40000000"):
        image_cost(_png(8, 2000), spec, 40_000_000, 3)
    with pytest.raises(InvalidArgument, match="max_pixels"):
        checked_placement(8, 2000, spec, 40_000_000, 0)


def test_the_header_cost_counts_the_resize_and_the_tensor() -> None:
    spec = _limit_side_spec()
    peak, tensor = image_cost(_png(100, 400), spec, 40_000_000, 0)
    assert tensor == 3 * 736 * 2944 * 4  # 100 x 400 -> 736 x 2944
    assert peak >= 100 * 400 * 3 + 736 * 2944 * 3 + tensor
