"""Preprocessing: every resize mode, layout, colour order and data type matches a plainly written
reference, the geometry maps boxes back exactly, and bad configs name the offending field."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from ferry.errors import ModelLoadError
from ferry.pipelines.preprocess import ImageTransform, PreprocessSpec, preprocess
from ferry_client.protocol import model_config_pb2 as mc

P = mc.FerryPreprocess
WIDTH, HEIGHT = 40, 32
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def make_spec(
    *,
    resize: int = P.EXACT,
    layout: int = P.NCHW,
    color: int = P.RGB,
    datatype: str = "FP32",
    width: int = WIDTH,
    height: int = HEIGHT,
    **fields: object,
) -> PreprocessSpec:
    channels = 1 if color == P.GRAY else 3
    dims = [channels, height, width] if layout == P.NCHW else [height, width, channels]
    fields.setdefault(
        "resize_engine", P.PILLOW
    )  # the references here are Pillow's; OpenCV's are in test_pipelines_engines
    pre = P(resize=resize, layout=layout, color_order=color, **fields)
    return PreprocessSpec.from_config(pre, dims, datatype)


def reference(image: Image.Image, spec: PreprocessSpec, *, resample: Image.Resampling) -> np.ndarray:
    """What the tensor should be, computed step by step with Pillow crop/paste and float64 maths."""
    source = image.convert("L") if spec.color_order == P.GRAY else image
    w, h = source.size
    if spec.resize == P.EXACT:
        canvas = source.resize((spec.width, spec.height), resample)
    elif spec.resize == P.SHORTER_SIDE_CENTER_CROP:
        short = spec.resize_shorter
        size = (short, math.floor(short * h / w)) if h >= w else (math.floor(short * w / h), short)
        resized = source.resize(size, resample)
        x0 = round((size[0] - spec.width) / 2)
        y0 = round((size[1] - spec.height) / 2)
        canvas = resized.crop((x0, y0, x0 + spec.width, y0 + spec.height))
    else:
        ratio = min(spec.width / w, spec.height / h)
        size = (round(w * ratio), round(h * ratio))
        fill = int(spec.pad_value) if source.mode == "L" else (int(spec.pad_value),) * 3
        canvas = Image.new(source.mode, (spec.width, spec.height), fill)
        corner = (0, 0) if spec.letterbox_corner else ((spec.width - size[0]) // 2, (spec.height - size[1]) // 2)
        canvas.paste(source.resize(size, resample), corner)
    values = np.array(canvas, dtype=np.float64)
    if values.ndim == 2:
        values = values.reshape(values.shape + (1,))
    if spec.color_order == P.BGR:
        values = values[:, :, [2, 1, 0]]
    if spec.datatype != "UINT8":
        for c in range(values.shape[2]):
            values[:, :, c] = (values[:, :, c] * spec.scale - spec.mean[c]) / spec.std[c]
    if spec.channels_first:
        values = np.stack([values[:, :, c] for c in range(values.shape[2])])
    return values


def photo(width: int = 97, height: int = 61) -> Image.Image:
    rng = np.random.default_rng(7)
    ys, xs = np.mgrid[0:height, 0:width]
    smooth = np.stack([xs * 2, ys * 3, xs + ys], axis=-1) % 256
    return Image.fromarray((smooth + rng.integers(0, 40, smooth.shape)).clip(0, 255).astype(np.uint8))


RESIZES = [
    pytest.param(P.EXACT, False, id="exact"),
    pytest.param(P.SHORTER_SIDE_CENTER_CROP, False, id="crop"),
    pytest.param(P.LETTERBOX, False, id="letterbox-centred"),
    pytest.param(P.LETTERBOX, True, id="letterbox-corner"),
]


@pytest.mark.parametrize(("resize", "corner"), RESIZES)
@pytest.mark.parametrize("layout", [P.NCHW, P.NHWC], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("color", [P.RGB, P.BGR, P.GRAY], ids=["rgb", "bgr", "gray"])
@pytest.mark.parametrize("datatype", ["FP32", "FP16", "UINT8"])
def test_matches_reference(resize: int, corner: bool, layout: int, color: int, datatype: str) -> None:
    fields: dict[str, object] = {"letterbox_corner": corner, "pad_value": 114, "interpolation": P.BICUBIC}
    if datatype != "UINT8":
        fields["mean"] = [0.5] if color == P.GRAY else IMAGENET_MEAN
        fields["std"] = [0.25] if color == P.GRAY else IMAGENET_STD
    spec = make_spec(resize=resize, layout=layout, color=color, datatype=datatype, **fields)
    image = photo()
    tensor, _ = preprocess(image, spec)
    expected = reference(image, spec, resample=Image.Resampling.BICUBIC)
    assert tensor.shape == expected.shape == spec.tensor_shape
    assert tensor.dtype == np.dtype(datatype.lower().replace("fp", "float"))
    assert tensor.flags.c_contiguous
    if datatype == "UINT8":
        assert np.array_equal(tensor, expected.astype(np.uint8))
    else:
        # FP16 cannot hold better than ~1e-3 relative; FP32 must be within 1e-3 absolute.
        tolerance = 1e-3 + (2.0**-10 * np.abs(expected) if datatype == "FP16" else 0.0)
        assert np.all(np.abs(tensor.astype(np.float64) - expected) <= tolerance)


def test_default_scale_is_one_over_255() -> None:
    spec = make_spec(layout=P.NHWC)
    tensor, _ = preprocess(Image.new("RGB", (WIDTH, HEIGHT), (255, 51, 0)), spec)
    assert np.allclose(tensor[0, 0], [1.0, 0.2, 0.0])


def test_explicit_scale_and_single_mean_std_broadcast() -> None:
    spec = make_spec(layout=P.NHWC, scale=1.0, mean=[100.0], std=[2.0])
    tensor, _ = preprocess(Image.new("RGB", (WIDTH, HEIGHT), (200, 100, 0)), spec)
    assert np.allclose(tensor[5, 5], [50.0, 0.0, -50.0])


def test_bgr_reverses_the_channels() -> None:
    spec = make_spec(color=P.BGR, datatype="UINT8")
    tensor, _ = preprocess(Image.new("RGB", (WIDTH, HEIGHT), (1, 2, 3)), spec)
    assert tensor[:, 0, 0].tolist() == [3, 2, 1]


def test_interpolation_is_honoured() -> None:
    image = photo(13, 9)
    nearest, _ = preprocess(image, make_spec(datatype="UINT8", layout=P.NHWC, interpolation=P.NEAREST))
    expected = np.asarray(image.resize((WIDTH, HEIGHT), Image.Resampling.NEAREST))
    assert np.array_equal(nearest, expected)


def test_exact_transform() -> None:
    _, transform = preprocess(photo(80, 16), make_spec())
    assert (transform.scale_x, transform.scale_y, transform.offset_x, transform.offset_y) == (0.5, 2.0, 0.0, 0.0)
    assert transform.to_original(np.array([[0.0, 0.0, 40.0, 32.0]])).tolist() == [[0.0, 0.0, 80.0, 16.0]]


def test_center_crop_geometry() -> None:
    spec = make_spec(resize=P.SHORTER_SIDE_CENTER_CROP, width=224, height=224)
    assert spec.resize_shorter == 256 and spec.decode_size == (256, 256)
    _, transform = preprocess(Image.new("RGB", (300, 200)), spec)
    # 300x200 -> 384x256, crop at x 80, y 16
    assert (transform.scale_x, transform.scale_y) == (1.28, 1.28)
    assert (transform.offset_x, transform.offset_y) == (-80.0, -16.0)
    box = transform.to_original(np.array([0.0, 0.0, 224.0, 224.0]))
    assert np.allclose(box, [62.5, 12.5, 237.5, 187.5])


def test_explicit_resize_shorter() -> None:
    spec = make_spec(resize=P.SHORTER_SIDE_CENTER_CROP, width=32, height=32, resize_shorter=48)
    tensor, transform = preprocess(photo(50, 100), spec)
    assert transform.scale_x == 48 / 50 and transform.offset_y == -round((96 - 32) / 2)
    assert tensor.shape == (3, 32, 32)


def letterbox_case() -> tuple[Image.Image, PreprocessSpec]:
    """A 200x100 black image with a white box at x 50..150, y 25..75, letterboxed into 128x128."""
    canvas = np.zeros((100, 200, 3), dtype=np.uint8)
    canvas[25:75, 50:150] = 255
    spec = make_spec(
        resize=P.LETTERBOX, layout=P.NHWC, datatype="UINT8", width=128, height=128, interpolation=P.NEAREST
    )
    return Image.fromarray(canvas), spec


def test_letterbox_maps_a_box_there_and_back_exactly() -> None:
    image, spec = letterbox_case()
    tensor, transform = preprocess(image, spec)
    assert (transform.scale_x, transform.scale_y, transform.offset_x, transform.offset_y) == (0.64, 0.64, 0.0, 32.0)
    rows, cols = np.nonzero(tensor[:, :, 0])
    drawn = [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]
    assert drawn == [32, 48, 96, 80]  # where the white box landed in the model input
    assert transform.to_input(np.array([50.0, 25.0, 150.0, 75.0])).tolist() == drawn
    assert transform.to_original(np.array(drawn, dtype=np.float64)).tolist() == [50.0, 25.0, 150.0, 75.0]


def test_letterbox_pads_with_pad_value() -> None:
    spec = make_spec(resize=P.LETTERBOX, layout=P.NHWC, datatype="UINT8", width=10, height=10, pad_value=7)
    tensor, transform = preprocess(Image.new("RGB", (10, 4), (200, 200, 200)), spec)
    assert transform.offset_y == 3.0
    assert (tensor[:3] == 7).all() and (tensor[7:] == 7).all() and (tensor[3:7] == 200).all()


def test_to_original_clips_to_the_image() -> None:
    transform = ImageTransform(0.5, 0.5, 0.0, 10.0, 100, 60, 50, 50)
    assert transform.to_original(np.array([[-4.0, 0.0, 60.0, 45.0]])).tolist() == [[0.0, 0.0, 100.0, 60.0]]


def test_datatype_comes_from_the_input_or_the_config() -> None:
    assert make_spec(datatype="TYPE_FP16").datatype == "FP16"
    pre = P(data_type=mc.TYPE_UINT8)
    assert PreprocessSpec.from_config(pre, [3, 8, 8], "UINT8").dtype == np.uint8


def test_gray_input_with_rgb_image_and_rgb_with_gray_image() -> None:
    gray_spec = make_spec(color=P.GRAY, datatype="UINT8")
    tensor, _ = preprocess(Image.new("RGB", (WIDTH, HEIGHT), (255, 0, 0)), gray_spec)
    assert tensor.shape == (1, HEIGHT, WIDTH)
    assert (tensor == 76).all()  # ITU-R 601 luma of pure red: 255 * 299 / 1000
    rgb_tensor, _ = preprocess(Image.new("L", (WIDTH, HEIGHT), 9), make_spec(datatype="UINT8"))
    assert (rgb_tensor == 9).all()


@pytest.mark.parametrize(
    ("pre", "dims", "datatype", "message"),
    [
        (P(), [3, 224], "FP32", "ferry_image.preprocess: the image input must have 3 dims"),
        (
            P(),
            [3, -1, -1],
            "FP32",
            "got dims [3, -1, -1]: declare the size the model was exported at in the config's input, "
            "e.g. dims: [3, 640, 640]",
        ),
        (P(layout=P.NHWC), [-1, -1, 3], "FP32", "dims: [640, 640, 3] for an Ultralytics export"),
        (P(), [1, 224, 224], "FP32", "ferry_image.preprocess.color_order: RGB gives 3 channel(s) but the input has 1"),
        (P(color_order=P.GRAY), [3, 8, 8], "FP32", "color_order: GRAY gives 1 channel(s) but the input has 3"),
        (P(layout=P.NHWC), [3, 8, 8], "FP32", "color_order: RGB gives 3 channel(s) but the input has 8"),
        (P(), [3, 8, 8], "INT64", "ferry_image.preprocess.data_type: the image input's type INT64 cannot be produced"),
        (P(data_type=mc.TYPE_INT32), [3, 8, 8], "FP32", "data_type: TYPE_INT32 is not supported"),
        (P(data_type=mc.TYPE_FP16), [3, 8, 8], "FP32", "data_type: TYPE_FP16 does not match the image input's type"),
        (P(mean=[1.0, 2.0]), [3, 8, 8], "FP32", "ferry_image.preprocess.mean: has 2 values; expected 1 or 3"),
        (P(std=[1.0, 0.0, 1.0]), [3, 8, 8], "FP32", "ferry_image.preprocess.std: values must be non-zero"),
        (P(mean=[0.5]), [3, 8, 8], "UINT8", "ferry_image.preprocess.mean: has no effect with a UINT8 tensor"),
        (P(scale=2.0), [3, 8, 8], "UINT8", "ferry_image.preprocess.scale: has no effect with a UINT8 tensor"),
        (P(pad_value=300), [3, 8, 8], "FP32", "ferry_image.preprocess.pad_value: must be within 0..255"),
        (
            P(resize=P.SHORTER_SIDE_CENTER_CROP, resize_shorter=100),
            [3, 224, 224],
            "FP32",
            "ferry_image.preprocess.resize_shorter: 100 is smaller than the 224x224 crop",
        ),
    ],
)
def test_config_errors_name_the_field(pre: mc.FerryPreprocess, dims: list[int], datatype: str, message: str) -> None:
    with pytest.raises(ModelLoadError) as info:
        PreprocessSpec.from_config(pre, dims, datatype)
    assert message in info.value.message


def test_center_crop_rounds_the_offset_like_torchvision() -> None:
    spec = make_spec(resize=P.SHORTER_SIDE_CENTER_CROP, width=32, height=32, resize_shorter=32)
    _, transform = preprocess(Image.new("RGB", (67, 32)), spec)
    assert transform.offset_x == -18.0  # round(35 / 2) with Python's round-half-even, as CenterCrop does
    _, transform = preprocess(Image.new("RGB", (32, 65)), spec)
    assert transform.offset_y == -16.0
