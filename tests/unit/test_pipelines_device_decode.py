"""JPEGs decoded on the pre-processing device (``preprocess { device: GPU decode: GPU }``), run on torch's
CPU device here (torchvision's libjpeg) and on CUDA (nvJPEG) where a GPU exists.

On the CPU device the decoded pixels are bit-identical to Pillow's (both libjpeg-turbo, ISLOW IDCT,
fancy upsampling): measured on the sample photos below, so the batches must match exactly. nvJPEG
rounds its IDCT differently; on CUDA the batch is compared with the tolerance of the resize alone plus
that rounding (see the README's "Decoding on the device").
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import skimage
import sklearn
from PIL import Image

from ferry.errors import InvalidArgument, ModelLoadError
from ferry.pipelines.runtime import ImagePipeline

from .test_pipelines_preprocess import P, make_spec, photo

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
from ferry.pipelines.device_decode import torchvision_problem  # noqa: E402
from ferry.pipelines.device_preprocess import DevicePreprocessor  # noqa: E402

if torchvision_problem():
    pytest.skip(f"torchvision's JPEG decoder is not usable here ({torchvision_problem()})", allow_module_level=True)

SKLEARN_IMAGES = Path(sklearn.__file__).parent / "datasets" / "images"
SKIMAGE_DATA = Path(skimage.__file__).parent / "data"
PHOTOS = [SKLEARN_IMAGES / "china.jpg", SKLEARN_IMAGES / "flower.jpg", SKIMAGE_DATA / "rocket.jpg"]
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
#: Pixel levels the device batch may differ by: none on the CPU device (same libjpeg-turbo decode, same
#: resize), the resize's one level (BILINEAR) plus nvJPEG's IDCT rounding on CUDA.
TOLERANCE = {"cpu": 0.0, "cuda": 4.0}


def encoded(image: Image.Image, fmt: str = "JPEG", **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def pipelines(device: str, **fields: object) -> tuple[ImagePipeline, ImagePipeline, DevicePreprocessor]:
    """The device path decoding on the CPU (the reference) and decoding on the device, and the latter's preprocessor."""
    fields = {"resize": P.LETTERBOX, "pad_value": 114, "width": 48, "height": 40, "device": P.GPU, **fields}
    reference = DevicePreprocessor(make_spec(**fields), device)
    on_device = DevicePreprocessor(make_spec(decode=P.GPU, **fields), device)
    assert reference.decoder is None and on_device.decoder is not None
    make = lambda pre: ImagePipeline("input", pre.spec, None, None, ["out"], None, 10_000_000, pre)  # noqa: E731
    return make(reference), make(on_device), on_device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("color", [P.RGB, P.BGR, P.GRAY], ids=["rgb", "bgr", "gray"])
def test_device_decode_gives_the_batch_of_the_cpu_decoder(device: str, color: int) -> None:
    """The sample photos, decoded by torchvision on the device, give the batch Pillow's decode gives
    (grey converted as Pillow's convert("L")); every image was decoded on the device."""
    reference, on_device, pre = pipelines(device, color=color)
    images = [path.read_bytes() for path in PHOTOS]
    expected, got = reference.prepare(images), on_device.prepare(images)
    assert got.transforms == expected.transforms
    assert np.abs(got.batch.astype(np.float64) - expected.batch).max() * 255 <= TOLERANCE[device] + 1e-3
    assert pre.decoder is not None and pre.decoder.decoded == len(images) and pre.decoder.refused == 0


@pytest.mark.parametrize("device", DEVICES)
def test_other_formats_are_decoded_on_the_cpu_in_the_same_batch(device: str) -> None:
    """A PNG and a CMYK JPEG go to Pillow, the plain JPEG to the device; one batch, in request order."""
    reference, on_device, pre = pipelines(device)
    images = [
        encoded(photo(97, 61), "PNG"),
        encoded(photo(61, 120), quality=95),
        encoded(photo(50, 40).convert("CMYK")),
    ]
    expected, got = reference.prepare(images), on_device.prepare(images)
    assert got.transforms == expected.transforms
    assert np.abs(got.batch.astype(np.float64) - expected.batch).max() * 255 <= TOLERANCE[device] + 1e-3
    assert pre.decoder is not None and pre.decoder.decoded == 1


@pytest.mark.parametrize("device", DEVICES)
def test_exif_orientation_is_applied_as_pillow_does(device: str) -> None:
    """A JPEG saved sideways with EXIF orientation 6 comes out upright, as Pillow's exif_transpose gives it."""
    exif = Image.Exif()
    exif[0x0112] = 6
    image = encoded(photo(97, 61), quality=95, exif=exif)
    reference, on_device, pre = pipelines(device)
    expected, got = reference.prepare([image]), on_device.prepare([image])
    assert got.transforms == expected.transforms and expected.transforms[0].original_height == 97
    assert np.abs(got.batch.astype(np.float64) - expected.batch).max() * 255 <= TOLERANCE[device] + 1e-3
    assert pre.decoder is not None and pre.decoder.decoded == 1


@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_the_device_refuses_is_decoded_on_the_cpu_for_that_request_only(device: str) -> None:
    """A truncated JPEG makes torchvision refuse the request's batch: the CPU decoder decodes the
    request again and its error names the image; the next request is decoded on the device again."""
    _, on_device, pre = pipelines(device)
    good = encoded(photo(97, 61))
    with pytest.raises(InvalidArgument, match="image 1: truncated or corrupt JPEG data"):
        on_device.prepare([good, good[: len(good) // 2]])
    assert pre.decoder is not None and (pre.decoder.refused, pre.decoder.decoded) == (1, 0)
    on_device.prepare([good, good])
    assert (pre.decoder.refused, pre.decoder.decoded) == (1, 2)


def test_decode_on_the_device_needs_the_device_path_and_a_full_decode() -> None:
    with pytest.raises(ModelLoadError, match="preprocess.decode: GPU needs device: GPU"):
        make_spec(decode=P.GPU)
    with pytest.raises(ModelLoadError, match="preprocess.draft_decode: not available with decode: GPU"):
        make_spec(device=P.GPU, decode=P.GPU, draft_decode=True)
