"""Greedy non-maximum suppression: each kept box removes its overlapping rivals at once.

``nms`` defines the result in numpy, and runs OpenCV's ``cv2.dnn.NMSBoxes`` (C++, several times
faster with thousands of candidates) wherever that provably returns the same indices in the same
order; see ``_opencv_nms`` for when and why.
"""

from __future__ import annotations

from typing import Any, cast

import cv2
import numpy as np

#: How far OpenCV's overlap may lie from numpy's IoU: it computes 1 - (1 - IoU) and keeps the
#: result as a float32 (half a float32 step below 1 is 2**-25), plus double rounding.
_OVERLAP_ERROR = 2.0**-23
#: Below this many candidates the numpy loop is as fast as the call into OpenCV.
OPENCV_FROM = 64
#: OpenCV has no limit on the boxes it keeps, only on the candidates it considers (the best
#: ``top_k``), and its cost grows with candidates x kept boxes. So it first considers this many
#: (or 4 x the limit) and takes more, 4x at a time, only while fewer than the limit survive.
OPENCV_FIRST_CANDIDATES = 32


def nms(
    boxes_xyxy: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray | None,
    iou_threshold: float,
    class_agnostic: bool,
    max_detections: int | None,
    plus_one: bool = False,
) -> np.ndarray:
    """Indices of the boxes kept, best score first (equal scores: lower index first).

    A box is suppressed when its IoU with an already kept box is above ``iou_threshold``; unless
    ``class_agnostic``, only boxes of the same class compete.  ``max_detections`` of None or
    below 1 means no limit.  ``plus_one`` measures widths and heights as ``x2 - x1 + 1`` (the
    legacy pixel-index convention of Detectron, Caffe and OpenCV's dnn NMS).
    """
    boxes = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    score_values = np.asarray(scores, dtype=np.float64).reshape(-1)
    count = score_values.shape[0]
    if boxes.shape[0] != count:
        raise ValueError(f"nms: {boxes.shape[0]} boxes but {count} scores")
    limit = count if max_detections is None or max_detections < 1 else min(count, int(max_detections))
    if limit == 0:
        return np.empty(0, dtype=np.int64)
    if not class_agnostic and classes is not None:
        boxes = _separate_classes(boxes, np.asarray(classes).reshape(-1))
    if count >= OPENCV_FROM and not plus_one:  # OpenCV measures lengths as x2 - x1: numpy decides
        kept = _opencv_nms(boxes, score_values, iou_threshold, limit)
        if kept is not None:
            return kept
    return _numpy_nms(boxes, score_values, iou_threshold, limit, plus_one)


def _numpy_nms(
    boxes: np.ndarray, score_values: np.ndarray, iou_threshold: float, limit: int, plus_one: bool = False
) -> np.ndarray:
    """The definition: best score first (stable), a box survives while its IoU (``overlaps``) with
    every kept box is at most ``iou_threshold``."""
    order = np.argsort(-score_values, kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < limit:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        order = rest[overlaps(boxes, best, rest, plus_one) <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def overlaps(boxes: np.ndarray, best: int, others: np.ndarray, plus_one: bool = False) -> np.ndarray:
    """IoU of box ``best`` with each of ``others`` (x1, y1, x2, y2 rows); with ``plus_one`` every
    length is ``x2 - x1 + 1``. A zero union gives zero."""
    extra = 1.0 if plus_one else 0.0
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    widths = np.clip(x2 - x1 + extra, 0.0, None)
    heights = np.clip(y2 - y1 + extra, 0.0, None)
    inter = np.clip(np.minimum(x2[best], x2[others]) - np.maximum(x1[best], x1[others]) + extra, 0.0, None)
    inter *= np.clip(np.minimum(y2[best], y2[others]) - np.maximum(y1[best], y1[others]) + extra, 0.0, None)
    union = widths[best] * heights[best] + widths[others] * heights[others] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _opencv_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, limit: int) -> np.ndarray | None:
    """``_numpy_nms`` by ``cv2.dnn.NMSBoxes``, or None where it might differ.

    OpenCV sorts float32 scores with a stable sort (ties: lower index first, as numpy's), takes
    boxes as x, y, w, h and recomputes x + w, and keeps a box while 1 - (1 - IoU), rounded to a
    float32, is at most the threshold, also a float32. So it is used only when the scores are
    positive float32 values, x + w and y + h give back x2 and y2 exactly, and every box has an
    area (OpenCV counts two empty boxes as overlapping fully). Its overlap then differs from
    numpy's IoU by rounding only (at most ``_OVERLAP_ERROR``), and the threshold's rounding is
    bracketed: a run with the float32 just below ``iou_threshold - error`` suppresses at least
    what numpy does, one with the float32 just above ``iou_threshold + error`` at most; both visit
    the candidates in the same order, so when their results agree every decision agreed and
    numpy's result is that one (else None: an IoU lies within ~2e-7 of the threshold, and numpy
    decides). Considering only the best ``top_k`` candidates changes nothing about the boxes kept
    among them (greedy NMS visits them first), so once ``limit`` survive those are the answer.
    """
    if iou_threshold < 2 * _OVERLAP_ERROR:
        return None  # no non-negative threshold brackets it from below (OpenCV refuses negatives)
    scores32 = scores.astype(np.float32)
    if not ((scores32 > 0).all() and np.isfinite(scores32).all() and np.array_equal(scores32, scores)):
        return None  # OpenCV keeps only scores above a threshold >= 0
    widths = boxes[:, 2] - boxes[:, 0]
    heights = boxes[:, 3] - boxes[:, 1]
    exact = np.array_equal(boxes[:, 0] + widths, boxes[:, 2]) and np.array_equal(boxes[:, 1] + heights, boxes[:, 3])
    if not exact or not (widths * heights > np.finfo(np.float64).eps).all():
        return None
    rects = np.stack([boxes[:, 0], boxes[:, 1], widths, heights], axis=1)
    low = float(np.nextafter(np.float32(iou_threshold - _OVERLAP_ERROR), np.float32(-np.inf)))
    high = float(np.nextafter(np.float32(iou_threshold + _OVERLAP_ERROR), np.float32(np.inf)))
    count = len(scores)
    considered = min(count, max(OPENCV_FIRST_CANDIDATES, 4 * limit))
    while True:
        strict = _nms_boxes(rects, scores32, low, considered)
        loose = _nms_boxes(rects, scores32, high, considered)
        if not np.array_equal(strict, loose):
            return None
        if len(strict) >= limit or considered == count:
            return strict[:limit]
        considered = min(count, 4 * considered)


def _nms_boxes(rects: np.ndarray, scores: np.ndarray, threshold: float, top_k: int) -> np.ndarray:
    """``cv2.dnn.NMSBoxes`` on x, y, w, h rows (its stubs ask for sequences; arrays convert alike)."""
    found = cv2.dnn.NMSBoxes(cast(Any, rects), cast(Any, scores), 0.0, threshold, 1.0, top_k)
    return np.asarray(found, np.int64).reshape(-1)


def _separate_classes(boxes: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Shift each class's boxes into its own disjoint region, so one NMS pass never lets two
    classes overlap (per-class NMS without a loop over classes)."""
    if classes.shape[0] != boxes.shape[0]:
        raise ValueError(f"nms: {boxes.shape[0]} boxes but {classes.shape[0]} classes")
    if boxes.shape[0] == 0:
        return boxes
    _, class_rank = np.unique(classes, return_inverse=True)
    shifted = boxes - boxes.min()
    stride = shifted.max() + 1.0
    return shifted + (class_rank.reshape(-1).astype(np.float64) * stride)[:, None]


def weighted_nms(
    boxes_xyxy: np.ndarray,
    scores: np.ndarray,
    keypoints: np.ndarray | None,
    iou_threshold: float,
    max_detections: int | None,
    plus_one: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """MediaPipe's weighted (blended) NMS, class-agnostic: the best remaining box absorbs every
    remaining box overlapping it by more than ``iou_threshold`` (itself included) and becomes
    their score-weighted mean, keypoints too; it keeps its own score.

    Returns (indices of the leading boxes, best first; boxes with the blended rows written at
    those indices; keypoints likewise).
    """
    boxes = np.array(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    score_values = np.asarray(scores, dtype=np.float64).reshape(-1)
    points = None if keypoints is None else np.array(keypoints, dtype=np.float64)
    blended, blended_points = boxes.copy(), None if points is None else points.copy()
    limit = score_values.size if max_detections is None or max_detections < 1 else int(max_detections)
    order = np.argsort(-score_values, kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < limit:
        best = order[0]
        iou = overlaps(boxes, best, order, plus_one)
        group = order[iou > iou_threshold]
        if group.size:
            weights = score_values[group] / score_values[group].sum()
            blended[best] = weights @ boxes[group]
            if points is not None and blended_points is not None:
                blended_points[best] = np.tensordot(weights, points[group], axes=1)
        keep.append(int(best))
        order = order[iou <= iou_threshold]
        if best in order:  # a degenerate (zero-area) box never overlaps itself
            order = order[order != best]
    return np.asarray(keep, dtype=np.int64), blended, blended_points
