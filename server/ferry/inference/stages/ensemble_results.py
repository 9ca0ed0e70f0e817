"""Post-stage: ``/classify`` and ``/detect`` results from an ensemble that ends in vision steps.

The ensemble takes the encoded images as its one BYTES input. ``/detect`` reads the detection
step's outputs (``num_detections``, ``detection_boxes``, ``detection_scores``,
``detection_classes``); when the ensemble also returns ``CLASS_IDS``/``SCORES`` per crop with
``CROP_IMAGE_INDEX`` (a cascade), each detection carries the second model's classes. Each
detection also carries its ``detection_keypoints`` row (a detection step with keypoints) and, as
``extras``, every other output the ensemble returns per detection: an output declared with the
detection rows' dims first ([D, ...], as ``detection_boxes``) gives its row, and in a cascade an
output with one row per crop (``CROP_IMAGE_INDEX``'s) gives its crop's row.
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
from ...pipelines.detection_tensors import KEYPOINTS
from ...pipelines.preprocess import ImageTransform
from ...repository.model import ModelSpec
from ...types import InferenceRequest
from .encoded_images import encoded_images_request

DETECTION_OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
CLASS_OUTPUTS = ("CLASS_IDS", "SCORES")
CROP_INDEX = "CROP_IMAGE_INDEX"


@dataclass
class CascadeDetection(Detection):
    """A detection with the classes a second model gave its crop (empty when there is none) and
    the ensemble's other per-detection outputs (``extras``, by output name)."""

    classes: list[dict[str, Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)


class EnsembleImages:
    """``/classify`` or ``/detect`` on an ensemble whose outputs name an image task (see the module)."""

    cheap = True  # the steps did the work: this only reads their output rows

    def __init__(self, model: ModelSpec, task: str, options: dict[str, Any]) -> None:
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
        self.extras = _extra_outputs(model) if task == "detect" else ([], [])

    def request(self, model: ModelSpec, images: list[bytes], parameters: dict[str, Any]) -> InferenceRequest:
        return encoded_images_request(model, self.input, images, parameters)

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]:
        if self.task == "detect":
            return _detections(self.model, outputs, *self.extras)
        return _classes(self.model, outputs["CLASS_IDS"], outputs["SCORES"], "CLASS_IDS")


def _classes(model: ModelSpec, ids: np.ndarray, scores: np.ndarray, output: str) -> list[list[dict[str, Any]]]:
    labels = model.labels.get(output)
    return [
        [
            {"index": int(i), "label": labels[i] if labels and 0 <= i < len(labels) else None, "score": float(s)}
            for i, s in zip(row_ids.tolist(), row_scores.tolist(), strict=True)
        ]
        for row_ids, row_scores in zip(_rows(ids), _rows(scores), strict=True)
    ]


def _extra_outputs(model: ModelSpec) -> tuple[list[str], list[str]]:
    """The ensemble's other outputs per detection: those declared with the detection rows' dims
    first, and (in a cascade) the rest, one row per crop."""
    known = {*DETECTION_OUTPUTS, KEYPOINTS, CROP_INDEX}
    if CROP_INDEX in model.outputs:
        known.update(CLASS_OUTPUTS)
    rows = model.outputs["detection_boxes"].dims[:1]
    per_row = [name for name, spec in model.outputs.items() if name not in known and spec.dims[:1] == rows]
    per_crop = [] if CROP_INDEX not in model.outputs else [n for n in model.outputs if n not in {*known, *per_row}]
    return per_row, per_crop


def _detections(
    model: ModelSpec, outputs: dict[str, np.ndarray], per_row: list[str], per_crop: list[str]
) -> list[list[CascadeDetection]]:
    counts = outputs["num_detections"].reshape(-1)
    labels = model.labels.get("detection_classes")
    crops: list[list[int]] = [[] for _ in counts]  # each image's crops, in detection order
    if CROP_INDEX in outputs:
        for index, image in enumerate(outputs[CROP_INDEX].reshape(-1).tolist()):
            crops[image].append(index)
    per_crop_classes = None
    if all(name in outputs for name in (*CLASS_OUTPUTS, CROP_INDEX)):
        per_crop_classes = _classes(model, outputs["CLASS_IDS"], outputs["SCORES"], "CLASS_IDS")
    keypoints = outputs.get(KEYPOINTS)
    results = []
    for image, count in enumerate(counts.tolist()):
        found = []
        for row in range(count):
            class_id = int(outputs["detection_classes"][image, row])
            crop = crops[image][row] if row < len(crops[image]) else None
            extras = {name: _plain(outputs[name][image, row]) for name in per_row if name in outputs}
            if crop is not None:
                extras.update({name: _plain(outputs[name][crop]) for name in per_crop if name in outputs})
            found.append(
                CascadeDetection(
                    box=_box(outputs["detection_boxes"][image, row]),
                    score=float(outputs["detection_scores"][image, row]),
                    class_id=class_id,
                    label=labels[class_id] if labels and 0 <= class_id < len(labels) else None,
                    keypoints=None if keypoints is None else [(float(x), float(y)) for x, y in keypoints[image, row]],
                    classes=per_crop_classes[crop] if per_crop_classes is not None and crop is not None else [],
                    extras=extras,
                )
            )
        results.append(found)
    return results


def _plain(row: np.ndarray) -> Any:
    """One output row as JSON values (BYTES as UTF-8 text)."""
    if row.dtype == object:
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in row.reshape(-1)]
    return row.tolist()


def _rows(array: np.ndarray) -> np.ndarray:
    """One row per item (also for zero items, where reshape(-1) cannot infer the width)."""
    return array.reshape(array.shape[0], math.prod(array.shape[1:]))


def _box(row: np.ndarray) -> tuple[float, float, float, float]:
    x1, y1, x2, y2 = (float(v) for v in row)
    return x1, y1, x2, y2
