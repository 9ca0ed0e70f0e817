"""Which vision step a config asks for (``parameters { key: "step" ... }``)."""

from __future__ import annotations

from collections.abc import Callable

from ferry_client.protocol import model_config_pb2 as mc

from ...errors import ModelLoadError
from . import STEP_PARAMETER
from .backend import StepCompute
from .classes import classification_step
from .crops import crop_step
from .detections import detection_step
from .images import decode_preprocess_step

STEPS: dict[str, Callable[[mc.ModelConfig], StepCompute]] = {
    "decode_preprocess": decode_preprocess_step,
    "detection": detection_step,
    "crop": crop_step,
    "classification": classification_step,
}


def step_factory(kind: str | None) -> Callable[[mc.ModelConfig], StepCompute]:
    if kind is None:
        raise ModelLoadError(
            f'a ferry_vision model needs parameters {{ key: "{STEP_PARAMETER}" }} (one of: {", ".join(STEPS)})'
        )
    try:
        return STEPS[kind]
    except KeyError:
        raise ModelLoadError(
            f"parameters '{STEP_PARAMETER}': unknown vision step '{kind}' (known: {', '.join(STEPS)})"
        ) from None
