"""Which image task (``/classify``, ``/detect``, ``/embed``, ``/recognize``) a model declares, as the stage
that runs it."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgument
from ...ocr import is_ocr
from ...repository.model import ModelSpec
from . import ImageTask
from .classify import Classify
from .detect import Detect
from .embed import Embed
from .ensemble_results import EnsembleImages
from .recognize import Recognize


def image_task(model: ModelSpec, task: str, options: dict[str, Any]) -> ImageTask:
    """The stage for ``task`` on ``model``: its ``ferry_image`` section's (any model kind), or an
    ensemble's image outputs. ``InvalidArgument`` when the model declares no such task or an
    option is out of range (checked before any image is decoded)."""
    pipeline = model.pipeline
    if pipeline is not None:
        if pipeline.task != task:
            kind = {
                "classify": "a classification",
                "detect": "a detection",
                "embed": "an embedding",
                "recognize": "a text recognition",
            }[pipeline.task]
            raise InvalidArgument(f"model '{model.name}' is {kind} model; use /{pipeline.task}")
        if task == "classify":
            if not pipeline.declares_classes:
                raise InvalidArgument(
                    f"model '{model.name}' declares no classes (no label_filename on output "
                    f"'{pipeline.output_names[0]}' and no ferry_image.classification): /classify would rank raw "
                    "features; configure ferry_image.embedding and use /embed, or declare its classes"
                )
            return Classify(pipeline, options.get("top_k"))
        if task == "embed":
            return Embed(pipeline)
        if task == "recognize":
            return Recognize(pipeline)
        return Detect(
            pipeline, options.get("score_threshold"), options.get("iou_threshold"), options.get("max_detections")
        )
    if model.composing_models:
        if task in ("embed", "recognize"):
            section = "embedding" if task == "embed" else "text_recognition"
            raise InvalidArgument(f"model '{model.name}' is an ensemble; /{task} needs ferry_image.{section}")
        return EnsembleImages(model, task, options)
    raise InvalidArgument(f"model '{model.name}' has no image pipeline (ferry_image in its config)")


def check_image_request(model: ModelSpec, images: list[bytes], task: str) -> None:
    """What every image endpoint checks before its stage is chosen: images sent, and OCR models
    only through ``/ocr`` (and ``/ocr`` only on them)."""
    if not images:
        raise InvalidArgument("no images in the request")
    if is_ocr(model.config) != (task == "ocr"):
        raise InvalidArgument(
            f"model '{model.name}' is an OCR model; use /ocr"
            if task != "ocr"
            else f"model '{model.name}' is not an OCR model (platform ferry_ocr); /ocr needs one"
        )
