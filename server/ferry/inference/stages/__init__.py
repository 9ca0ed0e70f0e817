"""Stages a model's config attaches around its execution, whatever the model kind.

A pre-stage turns what the caller sent into the model's input (``image_input``: encoded images →
the pre-processed batch). A post-stage turns one execution's outputs into what the caller asked
for (``classify``, ``detect``, ``embed``, ``detection_tensors``, ``ensemble_results``); post-stages run in the
worker pool, once per execution for its whole batch, unless cheap (``PostStage.cheap``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ...pipelines.preprocess import ImageTransform
from ...repository.model import ModelSpec
from ...types import InferenceRequest


class PostStage(Protocol):
    """Runs on one execution's outputs (config dims, image axis first) and that execution's image
    transforms (empty when the input was not encoded images).

    ``cheap`` stages (top-k of a few scores, reading an ensemble's outputs: microseconds) run on
    the event loop; the others (detection decoders, NMS) in the worker pool, where waiting behind
    other requests' image decoding is worth it only for work that would stall every client."""

    @property
    def cheap(self) -> bool: ...

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> Any: ...


class ImageTask(PostStage, Protocol):
    """What ``/classify``, ``/detect`` or ``/embed`` runs on a model: the request its images become, the model
    outputs it reads, and (called as its post-stage) one result per image from them."""

    outputs: list[str]

    def request(self, model: ModelSpec, images: list[bytes], parameters: dict[str, Any]) -> InferenceRequest: ...

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]: ...
