"""Which image task (``/classify``, ``/detect``) a model declares, as the stage that runs it."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgument
from ...repository.model import ModelVersion
from . import ImageTask
from .classify import Classify
from .detect import Detect
from .ensemble_results import EnsembleImages


def image_task(model: ModelVersion, task: str, options: dict[str, Any]) -> ImageTask:
    """The stage for ``task`` on ``model``: its ``ferry_image`` section's (any model kind), or an
    ensemble's image outputs. ``InvalidArgument`` when the model declares no such task or an
    option is out of range (checked before any image is decoded)."""
    pipeline = model.pipeline
    if pipeline is not None:
        if pipeline.task != task:
            raise InvalidArgument(f"model '{model.name}' is a {pipeline.task} model; use /{pipeline.task}")
        if task == "classify":
            return Classify(pipeline, options.get("top_k"))
        return Detect(
            pipeline, options.get("score_threshold"), options.get("iou_threshold"), options.get("max_detections")
        )
    if model.composing_models:
        return EnsembleImages(model, task, options)
    raise InvalidArgument(f"model '{model.name}' has no image pipeline (ferry_image in its config)")
