"""Mean average precision (VOC all-point, per class) of detections against reference boxes.

Used by ``ferry optimize`` to compare an optimized detector with its FP32 original, and by the
example detector's build script and tests to score it against ground truth.
"""

from __future__ import annotations

import numpy as np

__all__ = ["average_precision", "box_iou", "mean_average_precision"]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU ``[N, M]`` of xyxy boxes (continuous coordinates, no +1)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    iw = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = iw * ih
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """VOC all-point interpolated AP: area under the monotone precision envelope."""
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.flatnonzero(mrec[1:] != mrec[:-1])
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


def mean_average_precision(
    detections: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    ground_truth: list[tuple[np.ndarray, np.ndarray]],
    iou_threshold: float = 0.5,
    num_classes: int | None = None,
) -> tuple[float, np.ndarray]:
    """Return (mAP, per-class AP) over images; classes with no ground truth are NaN and not averaged.

    ``detections[i]`` is (boxes, scores, classes) and ``ground_truth[i]`` is
    (boxes, classes) for image ``i``. Detections are taken best score first
    over all images; each one is a true positive when its best-overlapping
    ground-truth box of the same class reaches ``iou_threshold`` and was not
    matched before (VOC rules). ``num_classes`` defaults to the largest ground-truth class + 1;
    with no ground truth at all the mAP is NaN.
    """
    if num_classes is None:
        num_classes = 1 + max((int(classes.max()) for _, classes in ground_truth if len(classes)), default=-1)
    per_class = np.full(num_classes, np.nan)
    for cls in range(num_classes):
        gts = [boxes[classes == cls] for boxes, classes in ground_truth]
        n_gt = sum(len(g) for g in gts)
        if n_gt == 0:
            continue
        matched = [np.zeros(len(g), dtype=bool) for g in gts]
        entries = [
            (float(score), image, box)
            for image, (boxes, scores, classes) in enumerate(detections)
            for box, score in zip(boxes[classes == cls], scores[classes == cls], strict=True)
        ]
        entries.sort(key=lambda e: -e[0])
        hits = np.zeros(len(entries))
        for k, (_, image, box) in enumerate(entries):
            if len(gts[image]) == 0:
                continue
            ious = box_iou(box[None], gts[image])[0]
            best = int(ious.argmax())
            if ious[best] >= iou_threshold and not matched[image][best]:
                matched[image][best] = True
                hits[k] = 1
        tp = np.cumsum(hits)
        recall = tp / n_gt
        precision = tp / np.arange(1, len(entries) + 1)
        per_class[cls] = average_precision(recall, precision)
    if np.isnan(per_class).all():
        return float("nan"), per_class
    return float(np.nanmean(per_class)), per_class
