"""Greedy non-maximum suppression in numpy: each kept box removes its overlapping rivals at once."""

from __future__ import annotations

import numpy as np


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
