"""Raw detector outputs (YOLOv8, YOLOv5, boxes/scores/classes) to detections in original pixels.

Model outputs that do not have the configured shape are a model/config mismatch, not the
caller's fault, so they raise a plain ``FerryError`` (internal); bad per-request overrides raise
``InvalidArgument``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ferry.errors import FerryError, InvalidArgument
from ferry.pipelines.nms import nms
from ferry.pipelines.preprocess import ImageTransform
from ferry_client.protocol import model_config_pb2 as mc

_DET = mc.FerryDetection

#: Used when the config leaves ``iou_threshold`` at zero (an IoU threshold of 0 would suppress
#: any two touching boxes, which nobody means).
DEFAULT_IOU_THRESHOLD = 0.45
#: Used when the config leaves ``max_detections`` at zero ("the server default").
DEFAULT_MAX_DETECTIONS = 100
#: Best-scoring candidates per image that enter NMS; bounds its cost when thresholds are low.
MAX_NMS_CANDIDATES = 30000


@dataclass
class Detection:
    """One detected object; ``box`` is x1, y1, x2, y2 in the original image's pixels."""

    box: tuple[float, float, float, float]
    score: float
    class_id: int
    label: str | None


@dataclass(frozen=True)
class _Thresholds:
    score: float
    iou: float | None  # None: no NMS
    max_detections: int


def decode_detections(
    outputs: dict[str, np.ndarray],
    spec: mc.FerryDetection,
    output_names: list[str],
    transforms: list[ImageTransform],
    labels: list[str] | None,
    score_threshold: float | None = None,
    iou_threshold: float | None = None,
    max_detections: int | None = None,
) -> list[list[Detection]]:
    """Detections for each image of the batch (one list per transform), best score first.

    ``output_names`` are the outputs to read, in the order the format expects (the resolved
    ``spec.outputs``).  The keyword overrides come from the request and win over the spec.
    Detections need a score at or above the threshold and above zero (zero-score rows are
    padding in fixed-size outputs).
    """
    thresholds = _thresholds(spec, score_threshold, iou_threshold, max_detections)
    batch = len(transforms)
    if spec.format == _DET.YOLOV8:
        per_image = _yolov8(_output(outputs, output_names, 0, spec), batch)
    elif spec.format == _DET.YOLOV5:
        per_image = _yolov5(_output(outputs, output_names, 0, spec), batch)
    elif spec.format == _DET.BOXES_SCORES_CLASSES:
        tensors = [_output(outputs, output_names, i, spec) for i in range(3)]
        per_image = _boxes_scores_classes(tensors, [output_names[i] for i in range(3)], batch)
    else:
        raise FerryError(f"ferry_image.detection.format: unknown value {spec.format}")
    return [
        _finish(boxes, scores, classes, spec, transform, labels, thresholds)
        for (boxes, scores, classes), transform in zip(per_image, transforms, strict=True)
    ]


def _thresholds(
    spec: mc.FerryDetection, score: float | None, iou: float | None, max_detections: int | None
) -> _Thresholds:
    """Merge request overrides with the spec, validating what the caller sent."""
    if score is not None and not np.isfinite(score):
        raise InvalidArgument(f"score_threshold must be a finite number, got {score}")
    if iou is not None and not (np.isfinite(iou) and 0.0 <= iou <= 1.0):
        raise InvalidArgument(f"iou_threshold must be between 0 and 1, got {iou}")
    if max_detections is not None and max_detections < 1:
        raise InvalidArgument(f"max_detections must be at least 1, got {max_detections}")
    resolved_iou: float | None = iou
    if resolved_iou is None and (spec.iou_threshold > 0 or spec.format != _DET.BOXES_SCORES_CLASSES):
        # Already-decoded outputs usually come out of the model's own NMS: only suppress again
        # when an IoU threshold was configured or requested.
        resolved_iou = float(spec.iou_threshold) if spec.iou_threshold > 0 else DEFAULT_IOU_THRESHOLD
    return _Thresholds(
        score=float(spec.score_threshold) if score is None else float(score),
        iou=resolved_iou,
        max_detections=max_detections or int(spec.max_detections) or DEFAULT_MAX_DETECTIONS,
    )


def _output(outputs: dict[str, np.ndarray], names: list[str], position: int, spec: mc.FerryDetection) -> np.ndarray:
    fmt = _DET.DetectionFormat.Name(spec.format)
    if position >= len(names):
        raise FerryError(f"ferry_image.detection: format {fmt} reads {position + 1} output(s), only {len(names)} named")
    name = names[position]
    if name not in outputs:
        raise FerryError(f"ferry_image.detection: the model produced no output '{name}'")
    return np.asarray(outputs[name])


# Each format reader yields, per image, (boxes (A, 4) in the model's box format, scores (A,), classes (A,)).
_Candidates = tuple[np.ndarray, np.ndarray, np.ndarray]


def _yolov8(tensor: np.ndarray, batch: int) -> list[_Candidates]:
    """[batch, 4 + classes, anchors]: box, then one score per class; the best class wins."""
    _check_shape(tensor, batch, "[batch, 4 + classes, anchors]", ndim=3, axis=1, minimum=5)
    result = []
    for image in tensor[:batch]:
        class_scores = image[4:]
        classes = class_scores.argmax(axis=0)
        scores = np.take_along_axis(class_scores, classes[None, :], axis=0)[0]
        result.append((image[:4].T, scores, classes))
    return result


def _yolov5(tensor: np.ndarray, batch: int) -> list[_Candidates]:
    """[batch, anchors, 5 + classes]: box, objectness, class probabilities; score = obj * prob."""
    _check_shape(tensor, batch, "[batch, anchors, 5 + classes]", ndim=3, axis=2, minimum=6)
    result = []
    for image in tensor[:batch]:
        class_scores = image[:, 5:].astype(np.float32) * image[:, 4:5].astype(np.float32)
        classes = class_scores.argmax(axis=1)
        scores = np.take_along_axis(class_scores, classes[:, None], axis=1)[:, 0]
        result.append((image[:, :4], scores, classes))
    return result


def _boxes_scores_classes(tensors: list[np.ndarray], names: Sequence[str], batch: int) -> list[_Candidates]:
    """boxes [batch, K, 4], scores [batch, K], classes [batch, K] (integer or float class ids)."""
    boxes, scores, classes = tensors
    _check_shape(boxes, batch, "[batch, K, 4]", ndim=3, axis=2, minimum=4, name=names[0], exact=True)
    for tensor, name in ((scores, names[1]), (classes, names[2])):
        if tensor.ndim != 2 or tensor.shape != boxes.shape[:2]:
            raise FerryError(
                f"ferry_image.detection: output '{name}' must have shape {list(boxes.shape[:2])} to match "
                f"boxes '{names[0]}', got {list(tensor.shape)}"
            )
    return [(boxes[i], scores[i], classes[i]) for i in range(batch)]


def _check_shape(
    tensor: np.ndarray,
    batch: int,
    expected: str,
    *,
    ndim: int,
    axis: int,
    minimum: int,
    name: str = "",
    exact: bool = False,
) -> None:
    label = f"output '{name}'" if name else "the detection output"
    size_ok = tensor.ndim == ndim and (tensor.shape[axis] == minimum if exact else tensor.shape[axis] >= minimum)
    if not size_ok or tensor.shape[0] != batch:
        raise FerryError(
            f"ferry_image.detection: {label} must have shape {expected} with batch {batch}, got {list(tensor.shape)}"
        )


def _finish(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    spec: mc.FerryDetection,
    transform: ImageTransform,
    labels: list[str] | None,
    thresholds: _Thresholds,
) -> list[Detection]:
    """Threshold, suppress and map one image's candidates back to its original pixels."""
    scores = scores.astype(np.float64)
    class_ids = np.rint(classes).astype(np.int64) if classes.dtype.kind == "f" else classes.astype(np.int64)
    boxes = boxes.astype(np.float64)
    keep = (scores >= thresholds.score) & (scores > 0) & (class_ids >= 0) & np.isfinite(boxes).all(axis=1)
    candidates = np.flatnonzero(keep)
    if candidates.size > MAX_NMS_CANDIDATES:
        best = np.argpartition(-scores[candidates], MAX_NMS_CANDIDATES - 1)[:MAX_NMS_CANDIDATES]
        candidates = np.sort(candidates[best])
    boxes = _to_xyxy(boxes[candidates], spec.box_format)
    scores, class_ids = scores[candidates], class_ids[candidates]
    if thresholds.iou is None:
        chosen = np.argsort(-scores, kind="stable")[: thresholds.max_detections]
    else:
        chosen = nms(boxes, scores, class_ids, thresholds.iou, spec.class_agnostic_nms, thresholds.max_detections)
    original = transform.to_original(boxes[chosen])
    return [
        Detection(
            box=(float(x1), float(y1), float(x2), float(y2)),
            score=float(score),
            class_id=int(class_id),
            label=_label(labels, int(class_id)),
        )
        for (x1, y1, x2, y2), score, class_id in zip(original.tolist(), scores[chosen], class_ids[chosen], strict=True)
    ]


def _to_xyxy(boxes: np.ndarray, box_format: int) -> np.ndarray:
    if box_format == _DET.XYXY:
        return boxes
    if box_format != _DET.XYWH_CENTER:
        raise FerryError(f"ferry_image.detection.box_format: unknown value {box_format}")
    half = boxes[:, 2:4] / 2.0
    return np.concatenate([boxes[:, 0:2] - half, boxes[:, 0:2] + half], axis=1)


def _label(labels: list[str] | None, class_id: int) -> str | None:
    if labels is None or not 0 <= class_id < len(labels):
        return None
    return labels[class_id] or None
