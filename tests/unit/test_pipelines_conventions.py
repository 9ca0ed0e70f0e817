"""Reference conventions as named options: box clipping, letterbox size rounding and box mapping,
NMS with the legacy +1 pixel area, and embedding vectors; each default follows the detector (or task)
family's reference, and an explicit setting wins."""

from __future__ import annotations

import numpy as np
import pytest

from ferry.errors import ModelLoadError
from ferry.pipelines.decoders import InputSize, decoder_for
from ferry.pipelines.detection import decode_detections
from ferry.pipelines.embedding import check_embedding, embedding_tensor_spec, embeddings
from ferry.pipelines.nms import nms
from ferry.pipelines.preprocess import ImageTransform, PreprocessSpec, place
from ferry_client.protocol import model_config_pb2 as mc

D = mc.FerryDetection
P = mc.FerryPreprocess
E = mc.FerryEmbedding


# ---- box clipping -------------------------------------------------------------------------------

#: What each family's reference does with a box running past the image edge.
REFERENCE_CLIPS = {
    D.YOLOV8: True,  # Ultralytics scale_boxes -> clip_boxes
    D.YOLOV5: True,
    D.END_TO_END: True,
    D.DFL: True,
    D.BOXES_SCORES_CLASSES: True,
    D.SSD: False,  # MediaPipe
    D.YOLOX: False,  # the YOLOX repository's demo
    D.DETR: False,  # DETR's PostProcess
    D.DBNET: True,  # PaddleOCR's TextDetector clips each corner into the image
}


def test_every_format_has_its_references_clipping_default() -> None:
    assert set(REFERENCE_CLIPS) == set(D.DetectionFormat.values())
    for fmt, clips in REFERENCE_CLIPS.items():
        spec = D(format=fmt)
        if fmt == D.SSD:
            spec.anchors.CopyFrom(D.SsdAnchors(num_layers=1, strides=[8], min_scale=0.1, max_scale=0.9))
        assert decoder_for(spec, InputSize(64, 64)).clips_boxes is clips, D.DetectionFormat.Name(fmt)


def end_to_end(rows: list[tuple[float, ...]]) -> dict[str, np.ndarray]:
    return {"o": np.array([rows], dtype=np.float32)}


HALF = ImageTransform(0.5, 0.5, 0.0, 0.0, 100, 80, 50, 40)  # a 100x80 photo in a 50x40 input


@pytest.mark.parametrize(
    ("clip", "box"),
    [(D.CLIP_DEFAULT, (0, 20, 100, 80)), (D.CLIP, (0, 20, 100, 80)), (D.NO_CLIP, (-20, 20, 120, 100))],
    ids=["default-clips", "clip", "no-clip"],
)
def test_clip_boxes_option(clip: int, box: tuple[float, ...]) -> None:
    spec = D(format=D.END_TO_END, clip_boxes=clip)
    [[found]] = decode_detections(end_to_end([(-10, 10, 60, 50, 0.9, 0)]), spec, ["o"], [HALF], None)
    assert found.box == pytest.approx(box)


def test_a_family_that_does_not_clip_can_be_told_to() -> None:
    rows = np.zeros((1, 2, 6), dtype=np.float32)
    rows[0, 0] = (-0.1, 0.5, 0.2, 0.2, 0.0, 0.0)  # DETR: normalised cx, cy, w, h past the left edge
    scores = np.array([[[4.0, 0.0], [0.0, 4.0]]], dtype=np.float32)  # class 0, then "no object"
    outputs = {"boxes": rows[..., :4], "scores": scores}
    spec = D(format=D.DETR, score_activation=D.SOFTMAX, score_threshold=0.5)
    size = ImageTransform(1.0, 1.0, 0.0, 0.0, 100, 100, 100, 100)
    [[raw]] = decode_detections(outputs, spec, ["boxes", "scores"], [size], None)
    assert raw.box[0] == pytest.approx(-20.0)
    spec.clip_boxes = D.CLIP
    [[clipped]] = decode_detections(outputs, spec, ["boxes", "scores"], [size], None)
    assert clipped.box[0] == 0.0


# ---- NMS with the legacy +1 area ----------------------------------------------------------------


def iou_plus_one(a: list[float], b: list[float]) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]) + 1)
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]) + 1)
    inter = width * height
    union = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + (b[2] - b[0] + 1) * (b[3] - b[1] + 1) - inter
    return inter / union


@pytest.mark.parametrize("threshold", [0.2, 0.5, 0.7])
def test_nms_plus_one_matches_the_legacy_formula(threshold: float) -> None:
    rng = np.random.default_rng(int(threshold * 10))
    corners = rng.integers(0, 60, size=(80, 2)).astype(np.float64)
    boxes = np.hstack([corners, corners + rng.integers(1, 12, size=(80, 2))])
    scores = rng.uniform(0, 1, 80)
    expected: list[int] = []
    for i in sorted(range(80), key=lambda i: (-scores[i], i)):
        if all(iou_plus_one(boxes[i].tolist(), boxes[j].tolist()) <= threshold for j in expected):
            expected.append(i)
    assert nms(boxes, scores, None, threshold, True, None, plus_one=True).tolist() == expected


def test_nms_plus_one_holds_where_opencv_would_run() -> None:
    """80 candidates take the OpenCV path without ``plus_one``; with it numpy must decide, since a
    pair overlapping by 0.33 continuously overlaps by 0.5 in pixel counts."""
    left = np.array([[10.0 * i, 0.0, 10.0 * i + 2, 2.0] for i in range(40)])
    boxes = np.vstack([left, left + [1.0, 0.0, 1.0, 0.0]])
    scores = np.linspace(0.9, 0.1, 80).astype(np.float32).astype(np.float64)
    assert len(nms(boxes, scores, None, 0.4, True, None)) == 80
    assert nms(boxes, scores, None, 0.4, True, None, plus_one=True).tolist() == list(range(40))


def test_nms_plus_one_is_a_detection_option() -> None:
    # Two 2x2 boxes touching at x = 2: IoU 0 without the +1 term; with it 1x3 of 3x3 + 3x3 - 3 = 0.2.
    rows = [(0, 0, 2, 2, 0.9, 0), (2, 0, 4, 2, 0.8, 0)]
    ident = ImageTransform(1.0, 1.0, 0.0, 0.0, 10, 10, 10, 10)
    for plus_one, kept in ((False, 2), (True, 1)):
        spec = D(format=D.END_TO_END, iou_threshold=0.15, nms_plus_one_area=plus_one)
        [found] = decode_detections(end_to_end(rows), spec, ["o"], [ident], None)
        assert len(found) == kept


# ---- letterbox conventions ----------------------------------------------------------------------


def letterbox(width: int, height: int, fmt: int | None, corner: bool = False, **fields: int) -> PreprocessSpec:
    pre = P(resize=P.LETTERBOX, letterbox_corner=corner, **fields)
    return PreprocessSpec.from_config(pre, [3, height, width], "FP32", fmt)


def test_yolox_truncates_the_letterboxed_size_and_ultralytics_rounds() -> None:
    # 451x300 into 416x416: 300 * 416 / 451 = 276.7
    assert place(451, 300, letterbox(416, 416, D.YOLOX, corner=True)).resized == (416, 276)
    assert place(451, 300, letterbox(416, 416, D.YOLOV8)).resized == (416, 277)
    assert place(451, 300, letterbox(416, 416, None)).resized == (416, 277)
    explicit = letterbox(416, 416, D.YOLOV8, letterbox_rounding=P.LETTERBOX_TRUNCATE)
    assert place(451, 300, explicit).resized == (416, 276)


def ultralytics_scale_boxes(box: list[float], original: tuple[int, int], size: tuple[int, int]) -> list[float]:
    """Ultralytics' ops.scale_boxes written out: (width, height) pairs."""
    gain = min(size[1] / original[1], size[0] / original[0])
    pad_x = round((size[0] - original[0] * gain) / 2 - 0.1)
    pad_y = round((size[1] - original[1] * gain) / 2 - 0.1)
    return [(box[0] - pad_x) / gain, (box[1] - pad_y) / gain, (box[2] - pad_x) / gain, (box[3] - pad_y) / gain]


@pytest.mark.parametrize("original", [(3000, 1880), (1880, 3000), (451, 300), (741, 500), (1921, 1079)])
def test_yolov8_maps_boxes_back_as_ultralytics_scale_boxes(original: tuple[int, int]) -> None:
    box = [100.5, 200.25, 300.75, 400.0]
    transform = place(*original, letterbox(640, 640, D.YOLOV8)).transform
    assert transform.to_original(np.array(box), clip=False).tolist() == pytest.approx(
        ultralytics_scale_boxes(box, original, (640, 640)), abs=1e-9
    )


def test_per_axis_mapping_is_the_explicit_alternative() -> None:
    """A 3000x1880 frame: per-axis ratios (401 / 1880 rows) put the bottom edge 0.31 px from
    Ultralytics' gain (640 / 3000)."""
    box = np.array([600.0, 500.0, 640.0, 520.0])
    gain = place(3000, 1880, letterbox(640, 640, D.YOLOV8)).transform.to_original(box, clip=False)
    per_axis = place(3000, 1880, letterbox(640, 640, D.YOLOV8, letterbox_mapping=P.PER_AXIS))
    assert per_axis.transform.scale_y == 401 / 1880
    assert np.abs(per_axis.transform.to_original(box, clip=False) - gain).max() == pytest.approx(0.3125)


def test_yolox_maps_back_by_dividing_by_the_ratio() -> None:
    transform = place(451, 300, letterbox(416, 416, D.YOLOX, corner=True)).transform
    ratio = min(416 / 451, 416 / 300)
    assert transform.to_original(np.array([10.0, 20.0, 30.0, 40.0])).tolist() == pytest.approx(
        [10 / ratio, 20 / ratio, 30 / ratio, 40 / ratio]
    )


def test_ultralytics_mapping_is_one_row_from_the_applied_padding_and_the_option_uses_the_applied() -> None:
    """A 3000x1880 photo into 320: LetterBox places it at top int(round(59.5 - 0.1)) = 59, but
    scale_boxes subtracts round(59.63 - 0.1) = 60, so a box's y is 1 / gain = 9.375 px off on the
    photo. LETTERBOX_GAIN keeps Ultralytics' 60 (its users' answers); LETTERBOX_GAIN_APPLIED_PADDING
    subtracts the 59 the pixels show."""
    from PIL import Image

    from ferry.pipelines.preprocess import preprocess

    photo = Image.new("RGB", (3000, 1880), (255, 255, 255))
    gain_spec = letterbox(320, 320, D.YOLOV8, pad_value=114, resize_engine=P.OPENCV)
    tensor, gain = preprocess(photo, gain_spec)
    rows = np.flatnonzero((tensor[0, :, 0] * 255).round() != 114)
    top, bottom = int(rows[0]), int(rows[-1]) + 1  # the photo's first and past-last rows in the input
    assert (top, bottom) == (59, 260) == (place(3000, 1880, gain_spec).top, 59 + 201)
    applied_spec = letterbox(
        320, 320, D.YOLOV8, pad_value=114, resize_engine=P.OPENCV, letterbox_mapping=P.LETTERBOX_GAIN_APPLIED_PADDING
    )
    _, applied = preprocess(photo, applied_spec)
    edges = np.array([0.0, top, 320.0, bottom])  # the photo's rectangle as the input shows it
    ratio = 320 / 3000
    assert applied.to_original(edges, clip=False).tolist() == pytest.approx([0.0, 0.0, 3000.0, 201 / ratio])
    assert gain.to_original(edges, clip=False).tolist() == pytest.approx([0.0, -1 / ratio, 3000.0, 200 / ratio])
    assert gain.to_original(edges, clip=False).tolist() == pytest.approx(
        ultralytics_scale_boxes(edges.tolist(), (3000, 1880), (320, 320))
    )
    assert applied.to_input(np.array([0.0, 0.0, 3000.0, 1880.0]))[1] == top  # maps both ways


@pytest.mark.parametrize("field", ["letterbox_rounding", "letterbox_mapping"])
def test_letterbox_options_are_refused_elsewhere(field: str) -> None:
    with pytest.raises(ModelLoadError, match=field):
        PreprocessSpec.from_config(P(resize=P.EXACT, **{field: 1}), [3, 8, 8], "FP32")
    with pytest.raises(ModelLoadError, match=field):
        PreprocessSpec.from_config(P(resize=P.LETTERBOX, pad_then_resize=True, **{field: 1}), [3, 8, 8], "FP32")
    with pytest.raises(ModelLoadError, match=f"{field}: unknown value 9"):
        PreprocessSpec.from_config(P(resize=P.LETTERBOX, **{field: 9}), [3, 8, 8], "FP32")


# ---- embeddings ---------------------------------------------------------------------------------


def test_flatten_keeps_every_feature_in_c_order() -> None:
    features = np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)
    vectors = embeddings(features, E(), max_batch_size=8)
    assert vectors.shape == (2, 12) and vectors.dtype == np.float32
    assert np.array_equal(vectors, features.reshape(2, -1))


@pytest.mark.parametrize(("pooling", "reduce"), [(E.MEAN, np.mean), (E.MAX, np.max)])
def test_pooling_reduces_the_spatial_dims(pooling: int, reduce: object) -> None:
    features = np.random.default_rng(0).normal(size=(3, 5, 4, 7)).astype(np.float32)
    vectors = embeddings(features, E(pooling=pooling), max_batch_size=8)
    np.testing.assert_allclose(vectors, reduce(features, axis=(2, 3)), rtol=1e-6)  # type: ignore[operator]


def test_pooling_sees_through_a_declared_batch_of_one() -> None:
    features = np.random.default_rng(1).normal(size=(1, 5, 4, 4)).astype(np.float32)
    vectors = embeddings(features, E(pooling=E.MEAN), max_batch_size=0)
    np.testing.assert_allclose(vectors, features.mean(axis=(2, 3)), rtol=1e-6)


def test_l2_normalised_rows_have_unit_length_and_zero_stays_zero() -> None:
    features = np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    vectors = embeddings(features, E(l2_normalize=True), max_batch_size=8)
    assert vectors.tolist() == [[pytest.approx(0.6), pytest.approx(0.8)], [0.0, 0.0]]


def test_embedding_output_spec_and_load_checks() -> None:
    assert embedding_tensor_spec(E(), [1280], 8).dims == (1280,)
    assert embedding_tensor_spec(E(), [1, 1280], 0).dims == (1280,)
    assert embedding_tensor_spec(E(pooling=E.MEAN), [512, 7, 7], 8).dims == (512,)
    assert embedding_tensor_spec(E(), [-1, 7], 8).dims == (-1,)
    with pytest.raises(ModelLoadError, match="needs a channels-first feature map"):
        check_embedding(E(pooling=E.MAX), [1280], 8)
    with pytest.raises(ModelLoadError, match="unknown value 7"):
        check_embedding(E(pooling=7), [1280], 8)
