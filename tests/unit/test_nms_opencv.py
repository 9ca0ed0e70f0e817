"""OpenCV's NMS where Ferry uses it returns exactly what the numpy definition returns: the same
indices in the same order, for random boxes with tied scores, duplicate boxes and IoUs that land
exactly on the threshold (boxes on a small integer grid make those common)."""

from __future__ import annotations

import importlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ferry.pipelines.nms import OPENCV_FROM, _numpy_nms, _opencv_nms, _separate_classes, nms

nms_module = importlib.import_module("ferry.pipelines.nms")  # the package exports the function as nms

THRESHOLDS = st.one_of(st.sampled_from([0.0, 0.25, 0.3, 0.45, 0.5, 0.6, 0.7, 1.0]), st.floats(0.0, 1.0))


@st.composite
def detections(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At least OPENCV_FROM boxes (so ``nms`` tries OpenCV): grid or float corners, some repeated,
    scores drawn from a few values (ties) or any float32, a few classes."""
    count = draw(st.integers(OPENCV_FROM, OPENCV_FROM + 16))
    grid = draw(st.booleans())
    corner = st.integers(0, 12).map(float) if grid else st.floats(0.0, 500.0, width=32)
    size = st.integers(1, 8).map(float) if grid else st.floats(0.5, 200.0, width=32)
    boxes = []
    for _ in range(count):
        if boxes and draw(st.integers(0, 9)) == 0:
            boxes.append(boxes[draw(st.integers(0, len(boxes) - 1))])  # an identical box
            continue
        x, y, w, h = draw(corner), draw(corner), draw(size), draw(size)
        boxes.append((x, y, x + w, y + h))
    tied = st.sampled_from([0.25, 0.5, 0.75, 0.9])
    score = tied if draw(st.booleans()) else st.floats(0.015625, 1.0, width=32)
    scores = np.array([draw(score) for _ in range(count)], np.float32).astype(np.float64)
    classes = np.array([draw(st.integers(0, 3)) for _ in range(count)])
    return np.array(boxes, np.float64), scores, classes


@settings(max_examples=60)
@given(detections(), THRESHOLDS, st.booleans(), st.one_of(st.none(), st.integers(1, 50)))
def test_nms_returns_what_the_numpy_definition_returns(
    found: tuple[np.ndarray, np.ndarray, np.ndarray], threshold: float, agnostic: bool, limit: int | None
) -> None:
    boxes, scores, classes = found
    expected_boxes = boxes if agnostic else _separate_classes(boxes, classes)
    expected = _numpy_nms(expected_boxes, scores, threshold, limit or len(scores))
    assert nms(boxes, scores, classes, threshold, agnostic, limit).tolist() == expected.tolist()


@settings(max_examples=40)
@given(detections(), THRESHOLDS)
def test_opencv_answers_are_exact_whenever_it_answers(
    found: tuple[np.ndarray, np.ndarray, np.ndarray], threshold: float
) -> None:
    """The OpenCV path on its own: whenever it gives an answer (not None), it is numpy's."""
    boxes, scores, _ = found
    answer = _opencv_nms(boxes, scores, threshold, len(scores))
    if answer is not None:
        assert answer.tolist() == _numpy_nms(boxes, scores, threshold, len(scores)).tolist()


def test_opencv_answers_for_a_detector_output() -> None:
    """3,000 float32 candidates of a YOLO-style output: OpenCV decides (no fallback)."""
    rng = np.random.default_rng(3)
    centres = rng.uniform(0, 640, (3000, 2)).astype(np.float32)
    sizes = rng.uniform(4, 120, (3000, 2)).astype(np.float32)
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=1).astype(np.float64)
    scores = rng.uniform(0.001, 1.0, 3000).astype(np.float32).astype(np.float64)
    for limit in (100, len(scores)):  # the usual max_detections, and none
        answer = _opencv_nms(boxes, scores, 0.45, limit)
        assert answer is not None
        assert answer.tolist() == _numpy_nms(boxes, scores, 0.45, limit).tolist()


def test_degenerate_boxes_stay_with_numpy(monkeypatch) -> None:
    """Two empty boxes overlap fully for OpenCV and not at all for numpy: numpy decides."""
    boxes = np.array([[1.0, 1.0, 1.0, 1.0]] * OPENCV_FROM)
    scores = np.linspace(0.9, 0.1, OPENCV_FROM)
    assert _opencv_nms(boxes, scores, 0.5, OPENCV_FROM) is None
    calls = []
    monkeypatch.setattr(nms_module, "_numpy_nms", lambda *args: calls.append(args) or np.arange(OPENCV_FROM))
    assert len(nms(boxes, scores, None, 0.5, True, None)) == OPENCV_FROM and calls
