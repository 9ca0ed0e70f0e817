"""``/classify`` and ``/detect`` on an ensemble that ends in vision steps.

The ensemble takes the encoded images as its one BYTES input. ``/detect`` reads the detection
step's outputs (``num_detections``, ``detection_boxes``, ``detection_scores``,
``detection_classes``); when the ensemble also returns ``CLASS_IDS``/``SCORES`` per crop with
``CROP_IMAGE_INDEX`` (a cascade), each detection carries the second model's classes.
``/classify`` reads ``CLASS_IDS`` and ``SCORES`` per image. Labels come from ``label_filename``
on those ensemble outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..pipelines.detection import Detection
from ..repository.model import ModelVersion

DETECTION_OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
CLASS_OUTPUTS = ("CLASS_IDS", "SCORES")


@dataclass
class CascadeDetection(Detection):
    """A detection with the classes a second model gave its crop (empty when there is none)."""

    classes: list[dict[str, Any]] = field(default_factory=list)


async def run_image_ensemble(model: ModelVersion, images: list[bytes], task: str, options: dict[str, Any]) -> list[Any]:
    """Per-image results of an image ensemble, in the shapes the image endpoints return."""
    needed = DETECTION_OUTPUTS if task == "detect" else CLASS_OUTPUTS
    missing = [name for name in needed if name not in model.outputs]
    if missing:
        raise InvalidArgument(
            f"ensemble '{model.name}' has no output {', '.join(repr(m) for m in missing)} for /{task}"
        )
    overrides = [key for key, value in options.items() if value is not None]
    if overrides:
        raise InvalidArgument(
            f"ensemble '{model.name}': {', '.join(overrides)} is set by its steps' configs, not per request"
        )
    if task == "classify" and "CROP_IMAGE_INDEX" in model.outputs:
        raise InvalidArgument(f"ensemble '{model.name}' classifies detections (a cascade); use /detect")
    image_inputs = [spec for spec in model.inputs.values() if spec.datatype == "BYTES"]
    if len(model.inputs) != 1 or not image_inputs:
        raise InvalidArgument(f"ensemble '{model.name}' does not take encoded images as its one BYTES input")
    spec = image_inputs[0]
    assert model.scheduler is not None
    chunk = model.max_batch_size or len(images)
    results: list[Any] = []
    for start in range(0, len(images), chunk):
        part = images[start : start + chunk]
        array = np.empty(len(part), dtype=object)
        array[:] = part
        shape = (len(part), *spec.dims) if model.max_batch_size else (len(part), *spec.dims[1:])
        outputs = await model.scheduler.submit({spec.name: array.reshape(shape)}, list(model.outputs), len(part))
        if task == "detect":
            results.extend(_detections(model, outputs))
        else:
            results.extend(_classes(model, outputs["CLASS_IDS"], outputs["SCORES"], "CLASS_IDS"))
    return results


def _classes(model: ModelVersion, ids: np.ndarray, scores: np.ndarray, output: str) -> list[list[dict[str, Any]]]:
    labels = model.labels.get(output)
    return [
        [
            {"index": int(i), "label": labels[i] if labels and 0 <= i < len(labels) else None, "score": float(s)}
            for i, s in zip(row_ids.tolist(), row_scores.tolist(), strict=True)
        ]
        for row_ids, row_scores in zip(_rows(ids), _rows(scores), strict=True)
    ]


def _detections(model: ModelVersion, outputs: dict[str, np.ndarray]) -> list[list[CascadeDetection]]:
    counts = outputs["num_detections"].reshape(-1)
    labels = model.labels.get("detection_classes")
    nested: list[list[list[dict[str, Any]]]] = [[] for _ in counts]
    if all(name in outputs for name in (*CLASS_OUTPUTS, "CROP_IMAGE_INDEX")):
        per_crop = _classes(model, outputs["CLASS_IDS"], outputs["SCORES"], "CLASS_IDS")
        for image, classes in zip(outputs["CROP_IMAGE_INDEX"].reshape(-1).tolist(), per_crop, strict=True):
            nested[image].append(classes)
    results = []
    for image, count in enumerate(counts.tolist()):
        found = []
        for row in range(count):
            class_id = int(outputs["detection_classes"][image, row])
            found.append(
                CascadeDetection(
                    box=tuple(float(v) for v in outputs["detection_boxes"][image, row]),  # type: ignore[arg-type]
                    score=float(outputs["detection_scores"][image, row]),
                    class_id=class_id,
                    label=labels[class_id] if labels and 0 <= class_id < len(labels) else None,
                    classes=nested[image][row] if row < len(nested[image]) else [],
                )
            )
        results.append(found)
    return results


def _rows(array: np.ndarray) -> np.ndarray:
    """One row per item (also for zero items, where reshape(-1) cannot infer the width)."""
    return array.reshape(array.shape[0], math.prod(array.shape[1:]))
