"""Raw detector outputs to detections in original pixels: the family's decoder (``decoders/``)
finds candidates, then thresholds, suppression and the mapping back are the same for all.

Model outputs that do not have the configured shape are a model/config mismatch, not the
caller's fault, so they raise a plain ``FerryError`` (internal) when served, and fail the load
when the config declares the shapes; bad per-request overrides raise ``InvalidArgument``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ferry.errors import FerryError, InvalidArgument
from ferry.pipelines.decoders import Candidates, Decoder, InputSize, decoder_for
from ferry.pipelines.nms import nms, weighted_nms
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
    """One detected object; ``box`` is x1, y1, x2, y2 and ``keypoints`` (x, y) pairs, both in
    the original image's pixels."""

    box: tuple[float, float, float, float]
    score: float
    class_id: int
    label: str | None
    keypoints: list[tuple[float, float]] | None = None
    #: Quadrilateral families (DBNET): the four corners, clockwise from the top-left; ``box`` bounds them.
    polygon: list[tuple[float, float]] | None = None


@dataclass(frozen=True)
class _Thresholds:
    score: float
    suppression: int  # GREEDY_NMS, WEIGHTED_NMS or NO_NMS
    iou: float
    max_detections: int
    clip: bool  # clip boxes to the original image
    plus_one: bool  # NMS areas with the legacy +1 pixel term


def load_decoder(
    spec: mc.FerryDetection, names: Sequence[str], shapes: Sequence[tuple[int, ...]], size: InputSize
) -> Decoder:
    """The decoder for a model, its declared output shapes checked (batch dimension included,
    -1 where dynamic). Raises ``FerryError`` naming the mismatch."""
    decoder = decoder_for(spec, size)
    decoder.check(shapes, names)
    return decoder


def decode_detections(
    outputs: dict[str, np.ndarray],
    spec: mc.FerryDetection,
    output_names: list[str],
    transforms: list[ImageTransform],
    labels: list[str] | None,
    score_threshold: float | None = None,
    iou_threshold: float | None = None,
    max_detections: int | None = None,
    decoder: Decoder | None = None,
) -> list[list[Detection]]:
    """Detections for each image of the batch (one list per transform), best score first.

    ``output_names`` are the outputs to read, in the order the format expects (the resolved
    ``spec.outputs``). ``decoder`` is the one built at load; without it one is built for the
    transforms' input size. The keyword overrides come from the request and win over the spec.
    Detections need a score at or above the threshold and above zero (zero-score rows are
    padding in fixed-size outputs).
    """
    if decoder is None:
        decoder = decoder_for(spec, InputSize(transforms[0].input_width, transforms[0].input_height))
    tensors = [_output(outputs, output_names, i, decoder) for i in range(len(decoder.outputs))]
    batch = len(transforms)
    decoder.check([t.shape for t in tensors], output_names)
    if decoder.polygons:
        if iou_threshold is not None:
            raise InvalidArgument(f"format {decoder.name} applies no NMS: iou_threshold does not apply")
        check_overrides(score_threshold, None, max_detections)
        limit = max_detections or int(spec.max_detections) or decoder.default_max_detections or DEFAULT_MAX_DETECTIONS
        return [
            _regions(decoder, tensors[0][image], transform, labels, score_threshold, limit)
            for image, transform in enumerate(transforms)
        ]
    thresholds = _thresholds(spec, decoder, score_threshold, iou_threshold, max_detections)
    for tensor, name in zip(tensors, output_names, strict=False):
        if tensor.shape[0] != batch:
            raise FerryError(
                f"ferry_image.detection: output '{name}' has batch {tensor.shape[0]}, expected {batch}, "
                f"shape {list(tensor.shape)}"
            )
    per_image = decoder.decode(tensors, thresholds.score)
    return [
        _finish(candidates, transform, labels, thresholds, spec.class_agnostic_nms)
        for candidates, transform in zip(per_image, transforms, strict=True)
    ]


def check_overrides(score: float | None, iou: float | None, max_detections: int | None) -> None:
    """A caller's per-request thresholds are usable (``InvalidArgument`` naming the bad one)."""
    if score is not None and not (np.isfinite(score) and 0.0 <= score <= 1.0):
        raise InvalidArgument(f"score_threshold must be between 0 and 1, got {score}")
    if iou is not None and not (np.isfinite(iou) and 0.0 <= iou <= 1.0):
        raise InvalidArgument(f"iou_threshold must be between 0 and 1, got {iou}")
    if max_detections is not None and max_detections < 1:
        raise InvalidArgument(f"max_detections must be at least 1, got {max_detections}")


def _thresholds(
    spec: mc.FerryDetection, decoder: Decoder, score: float | None, iou: float | None, max_detections: int | None
) -> _Thresholds:
    """Merge request overrides with the spec, validating what the caller sent."""
    check_overrides(score, iou, max_detections)
    suppression = spec.suppression or decoder.default_suppression
    asked = iou is not None or spec.iou_threshold > 0
    if suppression == _DET.NO_NMS and spec.suppression == _DET.SUPPRESSION_DEFAULT and asked:
        # Already-final outputs (the model's own NMS, set predictors): only suppress again when
        # an IoU threshold was configured or requested.
        suppression = _DET.GREEDY_NMS
    resolved_iou = iou if iou is not None else float(spec.iou_threshold) or DEFAULT_IOU_THRESHOLD
    return _Thresholds(
        score=float(spec.score_threshold) if score is None else float(score),
        suppression=suppression,
        iou=resolved_iou,
        max_detections=max_detections or int(spec.max_detections) or DEFAULT_MAX_DETECTIONS,
        clip=_clips(spec, decoder),
        plus_one=spec.nms_plus_one_area,
    )


def _clips(spec: mc.FerryDetection, decoder: Decoder) -> bool:
    """``clip_boxes`` as configured, or as the family's reference does (``Decoder.clips_boxes``)."""
    if spec.clip_boxes == _DET.CLIP_DEFAULT:
        return decoder.clips_boxes
    return spec.clip_boxes == _DET.CLIP


def _output(outputs: dict[str, np.ndarray], names: list[str], position: int, decoder: Decoder) -> np.ndarray:
    if position >= len(names):
        raise FerryError(
            f"ferry_image.detection: format {decoder.name} reads {len(decoder.outputs)} output(s), "
            f"only {len(names)} named"
        )
    name = names[position]
    if name not in outputs:
        raise FerryError(f"ferry_image.detection: the model produced no output '{name}'")
    return np.asarray(outputs[name])


def _finish(
    found: Candidates,
    transform: ImageTransform,
    labels: list[str] | None,
    thresholds: _Thresholds,
    class_agnostic: bool,
) -> list[Detection]:
    """Threshold, suppress and map one image's candidates back to its original pixels."""
    scores = np.asarray(found.scores, dtype=np.float64)
    classes = np.asarray(found.classes)
    class_ids = np.rint(classes).astype(np.int64) if classes.dtype.kind == "f" else classes.astype(np.int64)
    boxes = np.asarray(found.boxes, dtype=np.float64).reshape(-1, 4)
    keypoints = None if found.keypoints is None else np.asarray(found.keypoints, dtype=np.float64)
    keep = (scores >= thresholds.score) & (scores > 0) & (class_ids >= 0) & np.isfinite(boxes).all(axis=1)
    candidates = np.flatnonzero(keep)
    if candidates.size > MAX_NMS_CANDIDATES:
        best = np.argpartition(-scores[candidates], MAX_NMS_CANDIDATES - 1)[:MAX_NMS_CANDIDATES]
        candidates = np.sort(candidates[best])
    boxes, scores, class_ids = boxes[candidates], scores[candidates], class_ids[candidates]
    keypoints = None if keypoints is None else keypoints[candidates]
    if thresholds.suppression == _DET.NO_NMS:
        chosen = np.argsort(-scores, kind="stable")[: thresholds.max_detections]
    elif thresholds.suppression == _DET.WEIGHTED_NMS:
        chosen, boxes, keypoints = weighted_nms(
            boxes, scores, keypoints, thresholds.iou, thresholds.max_detections, thresholds.plus_one
        )
    else:
        chosen = nms(
            boxes, scores, class_ids, thresholds.iou, class_agnostic, thresholds.max_detections, thresholds.plus_one
        )
    original = transform.to_original(boxes[chosen], clip=thresholds.clip)
    points = None if keypoints is None else _points_to_original(keypoints[chosen], transform)
    return [
        Detection(
            box=(float(x1), float(y1), float(x2), float(y2)),
            score=float(scores[index]),
            class_id=int(class_ids[index]),
            label=_label(labels, int(class_ids[index])),
            keypoints=None if points is None else [(float(x), float(y)) for x, y in points[row]],
        )
        for row, ((x1, y1, x2, y2), index) in enumerate(zip(original.tolist(), chosen, strict=True))
    ]


def _regions(
    decoder: Decoder,
    probability_map: np.ndarray,
    transform: ImageTransform,
    labels: list[str] | None,
    box_threshold: float | None,
    limit: int,
) -> list[Detection]:
    """One image's quadrilaterals (already in original pixels), in the reference's order."""
    quads, scores = decoder.regions(probability_map, transform, box_threshold)
    return [
        Detection(
            box=(float(quad[:, 0].min()), float(quad[:, 1].min()), float(quad[:, 0].max()), float(quad[:, 1].max())),
            score=float(score),
            class_id=0,
            label=_label(labels, 0),
            polygon=[(float(x), float(y)) for x, y in quad.tolist()],
        )
        for quad, score in zip(quads[:limit], scores[:limit], strict=True)
    ]


def _points_to_original(points: np.ndarray, transform: ImageTransform) -> np.ndarray:
    """(N, K, 2) model-input points to original pixels (not clipped: a landmark may lie outside)."""
    offset = np.array([transform.offset_x, transform.offset_y])
    return (points - offset) / np.array([transform.scale_x, transform.scale_y])


def _label(labels: list[str] | None, class_id: int) -> str | None:
    if labels is None or not 0 <= class_id < len(labels):
        return None
    return labels[class_id] or None
