"""Post-processing: softmax/top-k/classification strings, NMS against a brute-force reference, and
detection decoding for each output format back to original pixels."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PIL import Image

from ferry.errors import FerryError, InvalidArgument
from ferry.pipelines.postprocess import (
    DEFAULT_MAX_DETECTIONS,
    Detection,
    classification_strings,
    decode_detections,
    nms,
    softmax,
    top_k,
)
from ferry.pipelines.preprocess import ImageTransform, PreprocessSpec, preprocess
from ferry_client.protocol import model_config_pb2 as mc

D = mc.FerryDetection
IDENTITY = ImageTransform(1.0, 1.0, 0.0, 0.0, 640, 640, 640, 640)


# ---- classification ---------------------------------------------------------------------------


def test_softmax_is_stable_and_normalised() -> None:
    logits = np.array([[1000.0, 1001.0, 1002.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    probabilities = softmax(logits)
    shifted = np.exp(np.array([-2.0, -1.0, 0.0]))
    assert np.allclose(probabilities[0], shifted / shifted.sum())
    assert np.allclose(probabilities[1], 1 / 3)
    assert probabilities.dtype == np.float32
    assert softmax(np.array([1, 2], dtype=np.int64)).dtype == np.float32


def test_top_k_breaks_ties_by_lower_index() -> None:
    scores = np.array([1.0, 3.0, 3.0, 2.0, 3.0])
    assert top_k(scores, 2)[0].tolist() == [1, 2]
    indices, values = top_k(scores, 4)
    assert indices.tolist() == [1, 2, 4, 3] and values.tolist() == [3.0, 3.0, 3.0, 2.0]
    assert top_k(scores, 10)[0].tolist() == [1, 2, 4, 3, 0]
    assert top_k(scores, 0)[0].shape == (0,)


def test_top_k_matches_sorting_on_rows_with_many_ties() -> None:
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 6, size=(4, 50)).astype(np.float32)
    indices, values = top_k(scores, 7)
    for row, got_indices, got_values in zip(scores, indices, values, strict=True):
        expected = sorted(range(len(row)), key=lambda i: (-row[i], i))[:7]
        assert got_indices.tolist() == expected
        assert got_values.tolist() == row[expected].tolist()


def test_top_k_ranks_nan_last() -> None:
    assert top_k(np.array([np.nan, 0.5, 0.2]), 3)[0].tolist() == [1, 2, 0]


def test_classification_strings_follow_triton() -> None:
    scores = np.array([0.1, 0.7, 0.2], dtype=np.float32)
    assert classification_strings(scores, 2, ["cat", "dog", "fox"]) == [b"0.700000:1:dog", b"0.200000:2:fox"]
    assert classification_strings(scores, 2, None) == [b"0.700000:1", b"0.200000:2"]
    assert classification_strings(scores, 5, ["cat", ""]) == [b"0.700000:1", b"0.200000:2", b"0.100000:0:cat"]
    assert classification_strings(np.array([[-1.5], [2.25]]), 1, None) == [b"2.250000:1"]
    assert classification_strings(np.array([3, 9, 4], dtype=np.int32), 2, None) == [b"9:1", b"4:2"]


# ---- NMS ----------------------------------------------------------------------------------------


def iou(a: list[float], b: list[float]) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    intersection = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - intersection
    return intersection / union if union > 0 else 0.0


def brute_force_nms(
    boxes: list[list[float]], scores: list[float], classes: list[int], threshold: float, agnostic: bool, limit: int
) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept: list[int] = []
    for i in order:
        if len(kept) == limit:
            break
        rivals = [j for j in kept if agnostic or classes[j] == classes[i]]
        if all(iou(boxes[i], boxes[j]) <= threshold for j in rivals):
            kept.append(i)
    return kept


def random_boxes(count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    corners = rng.uniform(0, 200, size=(count, 2))
    sizes = rng.uniform(5, 60, size=(count, 2))
    return np.hstack([corners, corners + sizes]), rng.uniform(0, 1, count), rng.integers(0, 4, count)


@pytest.mark.parametrize("agnostic", [False, True], ids=["per-class", "agnostic"])
@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.8])
@pytest.mark.parametrize("limit", [None, 10])
def test_nms_matches_brute_force(agnostic: bool, threshold: float, limit: int | None) -> None:
    boxes, scores, classes = random_boxes(150, seed=int(threshold * 10) + agnostic)
    kept = nms(boxes, scores, classes, threshold, agnostic, limit)
    expected = brute_force_nms(boxes.tolist(), scores.tolist(), classes.tolist(), threshold, agnostic, limit or 10**9)
    assert kept.tolist() == expected


def test_nms_equal_scores_keep_the_lower_index() -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [50, 50, 60, 60]], dtype=np.float64)
    assert nms(boxes, np.array([0.5, 0.5, 0.5]), None, 0.5, True, None).tolist() == [0, 2]
    assert nms(boxes, np.ones(3), np.array([1, 0, 0]), 0.5, False, None).tolist() == [0, 1, 2]
    assert nms(np.zeros((0, 4)), np.zeros(0), np.zeros(0), 0.5, False, 5).tolist() == []


# ---- detection decoding -------------------------------------------------------------------------


def detection_spec(**fields: object) -> mc.FerryDetection:
    return D(**fields)


def yolov8_tensor(rows: list[tuple[float, float, float, float, int, float]], classes: int, anchors: int) -> np.ndarray:
    """[1, 4 + classes, anchors] with the given (cx, cy, w, h, class, score) in the first anchors."""
    tensor = np.zeros((1, 4 + classes, anchors), dtype=np.float32)
    for anchor, (cx, cy, w, h, cls, score) in enumerate(rows):
        tensor[0, :4, anchor] = (cx, cy, w, h)
        if classes > 1:
            tensor[0, 4 + (cls + 1) % classes, anchor] = score / 4  # a weaker second class must not win
        tensor[0, 4 + cls, anchor] = score
    return tensor


def boxes_of(detections: list[Detection]) -> list[tuple[float, ...]]:
    return [tuple(round(v, 4) for v in d.box) for d in detections]


def test_yolov8_thresholds_nms_and_labels() -> None:
    rows = [
        (100, 100, 40, 40, 0, 0.9),
        (102, 101, 40, 40, 0, 0.8),  # same class, heavy overlap: suppressed
        (101, 100, 40, 40, 1, 0.7),  # other class: kept unless agnostic
        (300, 300, 20, 10, 2, 0.6),
        (500, 500, 20, 20, 1, 0.1),  # below the threshold
    ]
    outputs = {"output0": yolov8_tensor(rows, classes=3, anchors=8)}
    spec = detection_spec(format=D.YOLOV8, score_threshold=0.25, iou_threshold=0.5)
    [found] = decode_detections(outputs, spec, ["output0"], [IDENTITY], ["person", "car", "dog"])
    assert [(d.class_id, d.label, round(d.score, 4)) for d in found] == [
        (0, "person", 0.9),
        (1, "car", 0.7),
        (2, "dog", 0.6),
    ]
    assert boxes_of(found) == [(80, 80, 120, 120), (81, 80, 121, 120), (290, 295, 310, 305)]
    agnostic = detection_spec(format=D.YOLOV8, score_threshold=0.25, iou_threshold=0.5, class_agnostic_nms=True)
    [found] = decode_detections(outputs, agnostic, ["output0"], [IDENTITY], None)
    assert [d.class_id for d in found] == [0, 2] and found[0].label is None


def test_request_overrides_win_over_the_spec() -> None:
    rows = [(100, 100, 40, 40, 0, 0.9), (102, 101, 40, 40, 0, 0.8), (300, 300, 20, 10, 2, 0.6), (9, 9, 4, 4, 1, 0.1)]
    outputs = {"out": yolov8_tensor(rows, classes=3, anchors=4)}
    spec = detection_spec(format=D.YOLOV8, score_threshold=0.25, iou_threshold=0.5)
    [found] = decode_detections(outputs, spec, ["out"], [IDENTITY], None, score_threshold=0.05, iou_threshold=0.95)
    assert [round(d.score, 4) for d in found] == [0.9, 0.8, 0.6, 0.1]
    [found] = decode_detections(outputs, spec, ["out"], [IDENTITY], None, max_detections=2)
    assert [round(d.score, 4) for d in found] == [0.9, 0.6]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"iou_threshold": 1.5}, "iou_threshold must be between 0 and 1, got 1.5"),
        ({"score_threshold": float("nan")}, "score_threshold must be between 0 and 1"),
        ({"max_detections": 0}, "max_detections must be at least 1, got 0"),
    ],
)
def test_bad_overrides_are_the_callers_fault(overrides: dict[str, Any], message: str) -> None:
    outputs = {"out": yolov8_tensor([], classes=2, anchors=3)}
    with pytest.raises(InvalidArgument, match=message):
        decode_detections(outputs, detection_spec(), ["out"], [IDENTITY], None, **overrides)


def test_yolov8_maps_letterboxed_boxes_to_original_pixels() -> None:
    canvas = np.zeros((100, 200, 3), dtype=np.uint8)
    spec = PreprocessSpec.from_config(
        mc.FerryPreprocess(resize=mc.FerryPreprocess.LETTERBOX, layout=mc.FerryPreprocess.NHWC), [128, 128, 3], "FP32"
    )
    _, transform = preprocess(Image.fromarray(canvas), spec)
    # The box (50, 25)-(150, 75) of the original lands at (32, 48)-(96, 80) in the 128x128 input.
    outputs = {"o": yolov8_tensor([(64, 64, 64, 32, 0, 0.9), (10, 40, 40, 40, 0, 0.8)], classes=1, anchors=2)}
    [found] = decode_detections(outputs, detection_spec(score_threshold=0.5), ["o"], [transform], None)
    assert boxes_of(found) == [(50, 25, 150, 75), (0, 0, 46.875, 43.75)]  # the second is clipped to the image


def test_yolov8_batch_uses_each_images_transform() -> None:
    tensor = np.concatenate(
        [yolov8_tensor([(10, 10, 4, 4, 0, 0.9)], 2, 3), yolov8_tensor([(20, 20, 4, 4, 1, 0.8)], 2, 3)], axis=0
    )
    half = ImageTransform(0.5, 0.5, 0.0, 0.0, 1280, 1280, 640, 640)
    results = decode_detections({"o": tensor}, detection_spec(score_threshold=0.5), ["o"], [IDENTITY, half], None)
    assert boxes_of(results[0]) == [(8, 8, 12, 12)]
    assert boxes_of(results[1]) == [(36, 36, 44, 44)] and results[1][0].class_id == 1


def test_yolov5_multiplies_objectness_by_class_probability() -> None:
    tensor = np.zeros((1, 3 * (16 + 4 + 1), 5 + 3), dtype=np.float32)  # 3 anchors per cell of a 32x32 input
    tensor[0, 0] = [50, 50, 20, 20, 0.9, 0.1, 0.8, 0.1]  # 0.72, class 1
    tensor[0, 1] = [52, 50, 20, 20, 0.5, 0.0, 0.0, 1.0]  # 0.5, class 2
    tensor[0, 2] = [200, 200, 10, 10, 0.3, 0.9, 0.0, 0.0]  # 0.27, below 0.3
    tensor[0, 3] = [400, 400, 10, 10, 0.0, 1.0, 1.0, 1.0]  # no object
    spec = detection_spec(format=D.YOLOV5, score_threshold=0.3, iou_threshold=0.5)
    small = ImageTransform(1.0, 1.0, 0.0, 0.0, 640, 640, 32, 32)
    [found] = decode_detections({"p": tensor}, spec, ["p"], [small], None)
    assert [(d.class_id, round(d.score, 4)) for d in found] == [(1, 0.72), (2, 0.5)]
    assert boxes_of(found) == [(40, 40, 60, 60), (42, 40, 62, 60)]


def bsc_outputs(batch: int = 1) -> dict[str, np.ndarray]:
    boxes = np.zeros((batch, 4, 4), dtype=np.float32)
    boxes[:, 0] = [10, 10, 50, 50]
    boxes[:, 1] = [12, 10, 52, 50]  # overlaps box 0 heavily, same class
    boxes[:, 2] = [100, 100, 120, 140]
    scores = np.tile(np.array([0.9, 0.8, 0.4, 0.0], dtype=np.float32), (batch, 1))  # the last row is padding
    classes = np.tile(np.array([3.0, 3.0, 1.0, -1.0], dtype=np.float32), (batch, 1))
    return {"boxes": boxes, "scores": scores, "classes": classes}


def test_boxes_scores_classes_are_not_suppressed_again_by_default() -> None:
    spec = detection_spec(format=D.BOXES_SCORES_CLASSES, box_format=D.XYXY)
    [found] = decode_detections(bsc_outputs(), spec, ["boxes", "scores", "classes"], [IDENTITY], None)
    assert [(d.class_id, round(d.score, 4)) for d in found] == [(3, 0.9), (3, 0.8), (1, 0.4)]
    assert boxes_of(found)[2] == (100, 100, 120, 140)


def test_boxes_scores_classes_with_nms_and_centre_boxes() -> None:
    outputs = bsc_outputs(batch=2)
    outputs["boxes"][1, 2] = [110, 120, 20, 40]  # the same box as centre/size
    spec = detection_spec(format=D.BOXES_SCORES_CLASSES, box_format=D.XYWH_CENTER, iou_threshold=0.5)
    names = ["boxes", "scores", "classes"]
    results = decode_detections(outputs, spec, names, [IDENTITY, IDENTITY], None, score_threshold=0.3)
    assert [d.score for d in results[1]] == pytest.approx([0.9, 0.4])
    assert boxes_of(results[1])[1] == (100, 100, 120, 140)


def test_max_detections_defaults_when_unset() -> None:
    rows = [(20.0 * i + 10, 10, 8, 8, 0, 0.5) for i in range(DEFAULT_MAX_DETECTIONS + 5)]
    tensor = yolov8_tensor(rows, classes=1, anchors=len(rows))
    [found] = decode_detections({"o": tensor}, detection_spec(), ["o"], [IDENTITY], None)
    assert len(found) == DEFAULT_MAX_DETECTIONS


@pytest.mark.parametrize(
    ("spec", "outputs", "names", "message"),
    [
        (detection_spec(), {"a": np.zeros((1, 84, 10))}, ["b"], "the model produced no output 'b'"),
        (
            detection_spec(),
            {"a": np.zeros((2, 84, 10))},
            ["a"],
            r"output 'a' has batch 2, expected 1, shape \[2, 84, 10\]",
        ),
        (detection_spec(format=D.YOLOV5), {"a": np.zeros((1, 10, 5))}, ["a"], r"\[batch, anchors, 5 \+ classes\]"),
        (
            detection_spec(format=D.BOXES_SCORES_CLASSES),
            {"b": np.zeros((1, 5, 4)), "s": np.zeros((1, 5)), "c": np.zeros((1, 6))},
            ["b", "s", "c"],
            r"needs output 'c' \(classes \[batch, K\]\) of shape \[\*, 5\], the model's is \[1, 6\]",
        ),
        (detection_spec(format=D.BOXES_SCORES_CLASSES), {"b": np.zeros((1, 5, 4))}, ["b"], "reads 3 output"),
    ],
)
def test_model_output_mismatches_are_server_errors(
    spec: mc.FerryDetection, outputs: dict[str, np.ndarray], names: list[str], message: str
) -> None:
    with pytest.raises(FerryError, match=message) as info:
        decode_detections(outputs, spec, names, [IDENTITY], None)
    assert not isinstance(info.value, InvalidArgument)
