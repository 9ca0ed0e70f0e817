"""Batch pre-processing with torch (``preprocess { device: GPU }``) against the CPU (Pillow) path.

The torch path runs on any device, so these tests run it on the CPU here and on CUDA where a GPU
exists. Tolerance, in pixel levels (0..255 before scaling): Pillow and torch compute antialiased
filter weights slightly differently and both round to 8 bits, so a resampled pixel may differ by
one level (BILINEAR) or two (BICUBIC); NEAREST and regions that are not resampled (padding,
same-size images) must match exactly.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from ferry.errors import ModelLoadError
from ferry.pipelines.preprocess import place, preprocess, to_model_mode
from ferry.pipelines.resize import pixels_of
from ferry.pipelines.runtime import ImagePipeline

from .test_pipelines_preprocess import IMAGENET_MEAN, IMAGENET_STD, P, make_spec, photo

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
from ferry.pipelines import device_preprocess  # noqa: E402
from ferry.pipelines.device_preprocess import DevicePreprocessor  # noqa: E402

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False)"),
        ],
    ),
]
#: Largest difference in pixel levels for resampled pixels, and the share of pixels allowed to differ at all.
#: (Measured with torch 2.13 / Pillow 13 on these images: at most 1 level for BILINEAR, 2 for BICUBIC, and 10-19%
#: of pixels differing; NEAREST is exact.)
MAX_LEVELS = {P.BILINEAR: 1.0, P.BICUBIC: 2.0, P.NEAREST: 0.0}
MAX_DIFFERING_SHARE = {P.BILINEAR: 0.25, P.BICUBIC: 0.25, P.NEAREST: 0.0}

RESIZES = [
    pytest.param(P.EXACT, False, id="exact"),
    pytest.param(P.SHORTER_SIDE_CENTER_CROP, False, id="crop"),
    pytest.param(P.LETTERBOX, False, id="letterbox-centred"),
    pytest.param(P.LETTERBOX, True, id="letterbox-corner"),
]


def images() -> list[Image.Image]:
    """Three sizes: larger than the input (shrinking), smaller (growing) and a different aspect ratio."""
    return [photo(97, 61), photo(23, 17), photo(61, 120)]


def cpu_batch(spec, batch_images: list[Image.Image]) -> np.ndarray:
    return np.stack([preprocess(image, spec)[0] for image in batch_images])


def device_batch(spec, batch_images: list[Image.Image], device: str) -> np.ndarray:
    converted = [to_model_mode(image, spec) for image in batch_images]
    pixels = [np.asarray(image).reshape(image.size[1], image.size[0], -1) for image in converted]
    return DevicePreprocessor(spec, device)(pixels, [place(*image.size, spec) for image in converted])


def levels(spec, tensor: np.ndarray) -> np.ndarray:
    """Undo the normalisation: back to 0..255 pixel levels, channels last."""
    values = tensor.astype(np.float64)
    if spec.channels_first:
        values = np.moveaxis(values, 1, -1)
    if spec.datatype == "UINT8":
        return values
    return (values * np.asarray(spec.std) + np.asarray(spec.mean)) / spec.scale


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("resize", "corner"), RESIZES)
@pytest.mark.parametrize("interpolation", [P.BILINEAR, P.BICUBIC, P.NEAREST], ids=["bilinear", "bicubic", "nearest"])
def test_matches_the_cpu_path(device: str, resize: int, corner: bool, interpolation: int) -> None:
    spec = make_spec(
        resize=resize,
        letterbox_corner=corner,
        pad_value=114,
        interpolation=interpolation,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        width=40,
        height=32,
    )
    batch = images()
    expected = levels(spec, cpu_batch(spec, batch))
    got = levels(spec, device_batch(spec, batch, device))
    assert got.shape == expected.shape == (3, 32, 40, 3)
    difference = np.abs(got - expected)
    assert difference.max() <= MAX_LEVELS[interpolation] + 1e-3
    assert (difference > 1e-3).mean() <= MAX_DIFFERING_SHARE[interpolation]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", [P.NCHW, P.NHWC], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("color", [P.RGB, P.BGR, P.GRAY], ids=["rgb", "bgr", "gray"])
@pytest.mark.parametrize("datatype", ["FP32", "FP16", "UINT8"])
def test_layout_colour_and_type_match_exactly_without_resampling(
    device: str, layout: int, color: int, datatype: str
) -> None:
    """Letterboxing an image that already fits resamples nothing: both paths must agree exactly
    (up to FP16 rounding), padding included."""
    fields: dict[str, object] = {"pad_value": 114, "letterbox_corner": True}
    if datatype != "UINT8":
        fields["mean"] = [0.5] if color == P.GRAY else IMAGENET_MEAN
        fields["std"] = [0.25] if color == P.GRAY else IMAGENET_STD
    spec = make_spec(resize=P.LETTERBOX, layout=layout, color=color, datatype=datatype, width=40, height=32, **fields)
    batch = [photo(40, 20), photo(20, 32)]
    expected = cpu_batch(spec, batch)
    got = device_batch(spec, batch, device)
    assert got.dtype == expected.dtype and got.shape == expected.shape and got.flags.c_contiguous
    tolerance = 2.0**-10 * np.abs(expected.astype(np.float64)) if datatype == "FP16" else 1e-6
    assert np.all(np.abs(got.astype(np.float64) - expected.astype(np.float64)) <= tolerance)


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("device", DEVICES)
def test_pipeline_prepare_uses_the_batch_preprocessor(device: str) -> None:
    """ImagePipeline.prepare decodes on the CPU and hands the whole batch to the device pre-processor."""
    spec = make_spec(resize=P.LETTERBOX, pad_value=114, width=40, height=32)
    cpu = ImagePipeline("input", spec, None, None, ["out"], None, 10_000_000)
    on_device = ImagePipeline("input", spec, None, None, ["out"], None, 10_000_000, DevicePreprocessor(spec, device))
    encoded = [png(image) for image in images()]
    expected, got = cpu.prepare(encoded), on_device.prepare(encoded)
    assert got.transforms == expected.transforms
    assert np.abs(levels(spec, got.batch) - levels(spec, expected.batch)).max() <= MAX_LEVELS[P.BILINEAR] + 1e-3
    assert got.decode_ns > 0 and got.preprocess_ns > 0


def test_lanczos_is_refused_for_the_gpu() -> None:
    with pytest.raises(ModelLoadError, match="LANCZOS is not available with device: GPU"):
        make_spec(device=P.GPU, interpolation=P.LANCZOS)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where CUDA is absent")
def test_gpu_device_without_cuda_fails_to_load() -> None:
    from ferry.pipelines.runtime import _gpu_preprocessor

    with pytest.raises(ModelLoadError, match="device: GPU, but torch .* sees no CUDA device"):
        _gpu_preprocessor(make_spec(device=P.GPU), 0)


def test_options_the_device_cannot_reproduce_are_refused() -> None:
    """The torch path resizes like Pillow: the OpenCV engine, AREA and pad-then-resize fail at load,
    naming the field; the default engine on the device is PILLOW, so existing configs keep working."""
    with pytest.raises(ModelLoadError, match="preprocess.resize_engine: OPENCV is not available with device: GPU"):
        make_spec(device=P.GPU, resize_engine=P.OPENCV)
    with pytest.raises(ModelLoadError, match="preprocess.interpolation: AREA is not available with device: GPU"):
        make_spec(device=P.GPU, interpolation=P.AREA, resize_engine=P.ENGINE_DEFAULT)
    with pytest.raises(ModelLoadError, match="preprocess.pad_then_resize: not available with device: GPU"):
        make_spec(device=P.GPU, resize=P.LETTERBOX, pad_then_resize=True)
    assert make_spec(device=P.GPU, resize_engine=P.ENGINE_DEFAULT).engine == P.PILLOW


def test_device_preprocessor_rejects_an_opencv_spec() -> None:
    """Guard for specs built without the config check: an OpenCV-engine spec is not silently approximated."""
    with pytest.raises(ValueError, match="reproduces resize_engine: PILLOW"):
        DevicePreprocessor(make_spec(resize_engine=P.OPENCV), "cpu")


def pixels_and_places(spec, batch_images: list[Image.Image]) -> tuple[list[np.ndarray], list]:
    converted = [to_model_mode(image, spec) for image in batch_images]
    return [pixels_of(image) for image in converted], [place(*image.size, spec) for image in converted]


@pytest.mark.parametrize("device", DEVICES)
def test_calls_reuse_one_lane_and_its_buffers(device: str) -> None:
    """Calls one after another run on one lane: the same stream and the same upload buffer (pinned
    on CUDA), which no call allocates again; a call running while another holds the lane gets a
    second lane, kept for later."""
    spec = make_spec(resize=P.LETTERBOX, pad_value=114, width=40, height=32)
    preprocessor = DevicePreprocessor(spec, device)
    pixels, places = pixels_and_places(spec, images())
    first = preprocessor(pixels, places)
    with preprocessor.lanes.take() as lane:
        upload = lane.buffers.buffer("upload")
        assert upload is not None and upload.is_pinned() == (device == "cuda")
        stream = lane.stream
    second = preprocessor(pixels[:2], places[:2])
    with preprocessor.lanes.take() as lane:
        assert lane.stream is stream and lane.buffers.buffer("upload") is upload
        assert preprocessor.lanes.made == 1
        held = preprocessor(pixels, places)  # the only lane is taken: this call makes a second
        assert preprocessor.lanes.made == 2
    preprocessor(pixels, places)
    assert preprocessor.lanes.made == 2
    np.testing.assert_array_equal(second, first[:2])  # an answer is not overwritten by a later call
    np.testing.assert_array_equal(held, first)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", [P.BILINEAR, P.BICUBIC, P.NEAREST], ids=["bilinear", "bicubic", "nearest"])
def test_images_of_one_size_are_resized_in_one_call(
    device: str, interpolation: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five images of two sizes take two resize calls, and each image comes out exactly as alone."""
    spec = make_spec(resize=P.LETTERBOX, pad_value=114, interpolation=interpolation, width=40, height=32)
    large, small = photo(97, 61), photo(23, 17)
    flip, turn = Image.Transpose.FLIP_LEFT_RIGHT, Image.Transpose.ROTATE_180
    batch_images = [large, small, large.transpose(flip), small.transpose(turn), large.transpose(turn)]
    pixels, places = pixels_and_places(spec, batch_images)
    preprocessor = DevicePreprocessor(spec, device)
    alone = np.concatenate([preprocessor([p], [w]) for p, w in zip(pixels, places, strict=True)])
    calls = []
    interpolate = device_preprocess.functional.interpolate

    def counted(*args, **kwargs):
        calls.append(args[0].shape[0])
        return interpolate(*args, **kwargs)

    monkeypatch.setattr(device_preprocess.functional, "interpolate", counted)
    together = preprocessor(pixels, places)
    assert sorted(calls) == [2, 3]
    np.testing.assert_array_equal(together, alone)
