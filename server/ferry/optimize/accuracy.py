"""How far an optimized model's answers are from the FP32 model's, on the same inputs.

Classifiers: top-1 agreement (share of inputs whose best class is unchanged) and the largest
absolute difference of the raw outputs. Detectors: mAP@0.5 of the optimized model's detections
scored against the FP32 model's detections, and, when ground-truth boxes are given, the mAP of
both against them and its change. Both models run through the server's own backend and
post-processing code, so the numbers describe what serving will return.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..inference.validation import as_batch_of_one, engine_input, engine_output
from ..pipelines.detection import Detection
from ..pipelines.preprocess import ImageTransform
from ..repository.model import ModelVersion
from .calibration import OptimizeError
from .detection_map import box_iou, mean_average_precision

# (boxes [K, 4] xyxy, scores [K], classes [K]) for one image.
Boxes = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class AccuracyReport:
    """The comparison of a candidate model with its FP32 reference."""

    task: str  # "classify", "detect" or "tensor"
    samples: int
    max_abs_diff: float  # over every output element
    reference_max_abs: float  # the largest |output| of the reference, to put the diff in scale
    top1_agreement: float | None = None
    map_vs_reference: float | None = None
    map_reference: float | None = None  # against ground truth, when given
    map_candidate: float | None = None
    inputs: str = "inputs"  # what the samples were, for the report
    # Detectors, per detection: the FP32 detections the candidate found again (same class, IoU >= 0.5),
    # and for those pairs how far the score moved and how well the boxes overlap. mAP alone is blind
    # to scores that all moved together (it only ranks them) and to boxes that shifted a little.
    matched_share: float | None = None
    score_diff_max: float | None = None
    score_diff_p95: float | None = None
    box_iou_mean: float | None = None
    box_iou_min: float | None = None
    scores_outside_unit: int = 0  # candidate scores below 0 or above 1 ...
    reference_scores_outside_unit: int = 0  # ... and the FP32 model's (a detector may not output probabilities)
    detections: int = 0  # the FP32 model's detections the candidate's were paired with
    minimum: int | None = None  # the fewest inputs (detectors: FP32 detections) the INT8 gate judges by

    @property
    def compared(self) -> int:
        """What the gate's minimum counts: inputs, or for detectors the FP32 detections."""
        return self.detections if self.task == "detect" else self.samples

    @property
    def agreement(self) -> float | None:
        """The number the INT8 threshold applies to: top-1 agreement or mAP against the reference."""
        return self.top1_agreement if self.task != "detect" else self.map_vs_reference

    @property
    def map_delta(self) -> float | None:
        if self.map_reference is None or self.map_candidate is None:
            return None
        return self.map_candidate - self.map_reference

    def lines(self) -> list[str]:
        compared = f"compared on {self.samples} {self.inputs}"
        if self.task == "detect":
            compared += f", {self.detections} FP32 detections"
        if self.minimum is not None:
            unit = "FP32 detections" if self.task == "detect" else "inputs"
            compared += f" (the INT8 gate needs at least {self.minimum} {unit}: --min-compared)"
        out = [
            compared,
            f"max abs diff of outputs: {self.max_abs_diff:.4g} (largest |FP32 output|: {self.reference_max_abs:.4g})",
        ]
        if self.top1_agreement is not None:
            out.append(f"top-1 agreement with FP32: {self.top1_agreement:.2%}")
        if self.map_vs_reference is not None:
            out.append(f"mAP@0.5 against the FP32 model's detections: {self.map_vs_reference:.4f}")
        if self.matched_share is not None:
            out.append(
                f"FP32 detections found again (same class, IoU >= 0.5): {self.matched_share:.2%} "
                f"({round(self.matched_share * self.detections)} of {self.detections})"
            )
        if self.score_diff_max is not None:
            out.append(
                f"score change of those: p95 {self.score_diff_p95:.4f}, max {self.score_diff_max:.4f}; "
                f"box IoU: mean {self.box_iou_mean:.4f}, min {self.box_iou_min:.4f}"
            )
        if self.scores_outside_unit or self.reference_scores_outside_unit:
            out.append(f"scores outside 0..1: {self.scores_outside_unit} (FP32: {self.reference_scores_outside_unit})")
        if self.map_delta is not None:
            out.append(
                f"mAP@0.5 against ground truth: FP32 {self.map_reference:.4f}, optimized "
                f"{self.map_candidate:.4f}, delta {self.map_delta:+.4f}"
            )
        return out


@dataclass
class EvalBatch:
    inputs: dict[str, np.ndarray]
    transforms: list[ImageTransform] | None = None
    names: list[str] | None = None  # image file names relative to the eval directory


def _run(model: ModelVersion, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs with a leading image axis; a model without a batch dimension (``max_batch_size: 0``)
    runs one image per execution, as the server runs it."""
    instance = model.instances[0]
    if model.max_batch_size > 0:
        return instance.compute(inputs, list(model.outputs))
    [(name, images)] = inputs.items()
    spec = model.inputs[name]
    runs = [
        instance.compute({name: engine_input(spec, image.reshape(spec.dims), False)}, list(model.outputs))
        for image in images
    ]
    return {
        out: np.concatenate([as_batch_of_one(engine_output(model.outputs[out], run[out], 1, False)) for run in runs])
        for out in model.outputs
    }


def _as_arrays(found: list[Detection]) -> Boxes:
    return (
        np.array([d.box for d in found], dtype=np.float64).reshape(-1, 4),
        np.array([d.score for d in found], dtype=np.float64),
        np.array([d.class_id for d in found], dtype=np.int64),
    )


def compare(
    reference: ModelVersion,
    candidate: ModelVersion,
    batches: Iterable[EvalBatch],
    annotations: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    inputs: str = "inputs",
) -> AccuracyReport:
    """Run both models on every batch and measure how much the candidate's answers moved."""
    pipeline = reference.pipeline
    task = pipeline.task if pipeline is not None else "tensor"
    samples, max_diff, ref_max, agree = 0, 0.0, 0.0, 0
    ref_boxes: list[Boxes] = []
    cand_boxes: list[Boxes] = []
    names: list[str] = []
    first = next(iter(reference.outputs))
    for batch in batches:
        ref_out = _run(reference, batch.inputs)
        cand_out = _run(candidate, batch.inputs)
        for name, value in ref_out.items():
            ref32 = value.astype(np.float64)
            max_diff = max(max_diff, float(np.abs(ref32 - cand_out[name].astype(np.float64)).max(initial=0.0)))
            ref_max = max(ref_max, float(np.abs(ref32).max(initial=0.0)))
        count = len(next(iter(batch.inputs.values())))
        samples += count
        if task == "detect":
            assert pipeline is not None and batch.transforms is not None
            ref_boxes.extend(_as_arrays(d) for d in pipeline.detect(ref_out, batch.transforms))
            cand_boxes.extend(_as_arrays(d) for d in pipeline.detect(cand_out, batch.transforms))
            names.extend(batch.names or [])
        else:
            ref_scores = ref_out[first].reshape(count, -1)
            agree += int((ref_scores.argmax(1) == cand_out[first].reshape(count, -1).argmax(1)).sum())
    if samples == 0:
        raise OptimizeError("no evaluation inputs")
    report = AccuracyReport(task, samples, max_diff, ref_max, inputs=inputs)
    if task != "detect":
        report.top1_agreement = agree / samples
        return report
    pseudo_truth = [(boxes, classes) for boxes, _, classes in ref_boxes]
    report.map_vs_reference = mean_average_precision(cand_boxes, pseudo_truth)[0]
    _compare_detections(report, ref_boxes, cand_boxes)
    if annotations is not None:
        missing = [name for name in names if name not in annotations]
        if missing:
            raise OptimizeError(f"--eval-annotations has no entry for {len(missing)} image(s), e.g. {missing[0]}")
        truth = [annotations[name] for name in names]
        report.map_reference = mean_average_precision(ref_boxes, truth)[0]
        report.map_candidate = mean_average_precision(cand_boxes, truth)[0]
    return report


def match_detections(reference: Boxes, candidate: Boxes, iou_threshold: float = 0.5) -> list[tuple[int, int, float]]:
    """Pairs (reference index, candidate index, IoU): each reference detection, best score first, takes
    the unmatched candidate of its class that overlaps it most, if that overlap reaches the threshold."""
    ref_xyxy, ref_scores, ref_classes = reference
    cand_xyxy, _, cand_classes = candidate
    ious = box_iou(ref_xyxy, cand_xyxy)
    taken = np.zeros(len(cand_xyxy), dtype=bool)
    pairs = []
    for r in np.argsort(-ref_scores, kind="stable"):
        allowed = (cand_classes == ref_classes[r]) & ~taken
        if not allowed.any():
            continue
        overlaps = np.where(allowed, ious[r], -1.0)
        c = int(overlaps.argmax())
        if overlaps[c] >= iou_threshold:
            taken[c] = True
            pairs.append((int(r), c, float(overlaps[c])))
    return pairs


def _compare_detections(report: AccuracyReport, reference: list[Boxes], candidate: list[Boxes]) -> None:
    score_diffs: list[float] = []
    ious: list[float] = []
    total = 0
    for ref, cand in zip(reference, candidate, strict=True):
        total += len(ref[1])
        for r, c, iou in match_detections(ref, cand):
            score_diffs.append(abs(float(ref[1][r]) - float(cand[1][c])))
            ious.append(iou)
        report.scores_outside_unit += int(((cand[1] < 0) | (cand[1] > 1)).sum())
        report.reference_scores_outside_unit += int(((ref[1] < 0) | (ref[1] > 1)).sum())
    report.detections = total
    report.matched_share = len(ious) / total if total else None
    if ious:
        report.score_diff_max = max(score_diffs)
        report.score_diff_p95 = float(np.percentile(score_diffs, 95))
        report.box_iou_mean = float(np.mean(ious))
        report.box_iou_min = min(ious)


def read_annotations(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Ground-truth boxes: JSON ``{"image name": [[x1, y1, x2, y2, class_id], ...], ...}`` with names
    relative to the evaluation directory and boxes in original-image pixels."""
    try:
        raw = json.loads(path.read_text())
        parsed = {}
        for name, boxes in raw.items():
            table = np.asarray(boxes, dtype=np.float64).reshape(-1, 5)
            parsed[name] = (table[:, :4], table[:, 4].astype(np.int64))
        return parsed
    except (OSError, ValueError, AttributeError) as exc:
        raise OptimizeError(
            f"{path}: not an annotations file ({{name: [[x1, y1, x2, y2, class], ...]}}): {exc}"
        ) from None
