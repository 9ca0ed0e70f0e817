"""Post-stage: ``/classify`` and ``/detect`` results from an ensemble that ends in vision steps.

The ensemble takes the encoded images as its one BYTES input. ``/detect`` reads the detection
step's outputs (``num_detections``, ``detection_boxes``, ``detection_scores``,
``detection_classes``); when the ensemble also returns ``CLASS_IDS``/``SCORES`` per crop with
``CROP_IMAGE_INDEX`` (a cascade), each detection carries the second model's classes.
``/classify`` reads ``CLASS_IDS`` and ``SCORES`` per image. Labels come from ``label_filename``
on those ensemble outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import InvalidArgument
from ...pipelines.detection import Detection
from ...pipelines.preprocess import ImageTransform
from ...repository.model import ModelVersion
from ...types import InferenceRequest
from .encoded_images import encoded_images_request

DETECTION_OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
CLASS_OUTPUTS = ("CLASS_IDS", "SCORES")


@dataclass
class CascadeDetection(Detection):
    """A detection with the classes a second model gave its crop (empty when there is none)."""

    classes: list[dict[str, Any]] = field(default_factory=list)


class EnsembleImages:
    """``/classify`` or ``/detect`` on an ensemble whose outputs name an image task (see the module)."""

    cheap = True  # the steps did the work: this only reads their output rows

    def __init__(self, model: ModelVersion, task: str, options: dict[str, Any]) -> None:
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
        self.model = model
        self.task = task
        self.input = image_inputs[0]
        self.outputs = list(model.outputs)

    def request(self, model: ModelVersion, images: list[bytes], parameters: dict[str, Any]) -> InferenceRequest:
        return encoded_images_request(model, self.input, images, parameters)

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]:
        if self.task == "detect":
            return _detections(self.model, outputs)
        return _classes(self.model, outputs["CLASS_IDS"], outputs["SCORES"], "CLASS_IDS")


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
                    box=_box(outputs["detection_boxes"][image, row]),
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


def _box(row: np.ndarray) -> tuple[float, float, float, float]:
    x1, y1, x2, y2 = (float(v) for v in row)
    return x1, y1, x2, y2
