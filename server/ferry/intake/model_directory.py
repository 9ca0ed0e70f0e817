"""The model process's answers to an intake process about its models (``describe`` and ``stats``
of the hand-off protocol): which load serves a model, what the intake needs to run its image
front half (the completed config and labels, from which it builds the same ``ImagePipeline``),
and whether it may at all.

Everything travels as JSON data: the config as its serialized protobuf (base64), parsed by the
intake as data, never as code.
"""

from __future__ import annotations

import base64
from typing import Any

from ..api.dataplane import DataPlane
from ..errors import FerryError
from ..ocr import is_ocr
from ..repository.model import ModelVersion


def relay_reason(plane: DataPlane, model: ModelVersion) -> str:
    """Why an intake process must relay ``model``'s image requests to the model process ("" when it
    may decode, pre-process and post-process them itself, handing only tensors over)."""
    pipeline = model.pipeline
    if is_ocr(model.config):
        return "an OCR model (its detection, crops and recognition run as one model)"
    if model.composing_models:
        return "an ensemble (its steps decode the images)"
    if pipeline is None:
        return "no image pipeline (ferry_image): the model process gives the error"
    if pipeline.spec is None:
        return "its image input takes encoded images (BYTES): the model decodes them itself"
    if pipeline.spec.variable_size or pipeline.text_recognition is not None:
        return "a text model (variable-size input or text-line recognition): not yet split across processes"
    if model.decoupled:
        return "a decoupled model"
    if plane.cache is not None and model.config.response_cache.enable:
        return "its response cache keys on the encoded images"
    return ""


class ModelDirectory:
    """``handoff.ModelDirectory`` over the model process's data plane."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    def describe(self, name: str, version: str, known: str) -> dict[str, Any]:
        """The load serving (name, version), as one process resolves it (its errors too): only its
        identity when the intake ``known``s it already, else everything the intake builds it from."""
        model = self.plane.model(name, version)
        if model.identity == known:
            return {"identity": model.identity}
        reason = relay_reason(self.plane, model)
        description: dict[str, Any] = {"identity": model.identity, "relay": reason}
        if not reason:
            description.update(
                version=model.version,
                generation=model.load_generation,
                config=base64.b64encode(model.config.SerializeToString()).decode(),
                labels=model.labels,
                model_dir=str(model.model_dir),
            )
        return description

    def identity(self, name: str, version: str) -> str:
        return self.plane.model(name, version).identity

    def decoupled(self, name: str, version: str) -> bool:
        """Whether (name, version) is served by a decoupled model (False when it cannot be served:
        running the request gives the error)."""
        return self.plane.is_decoupled(name, version)

    def record(self, identity: str, kind: str, args: list[Any]) -> None:
        """Add what an intake recorded to the statistics of that load (dropped once it is gone)."""
        name, version, _ = identity.split("\x00")
        try:
            model = self.plane.model(name, version)
        except FerryError:
            return
        if model.identity != identity:
            return
        if kind == "images":
            count, decode_ns, preprocess_ns = (int(value) for value in args)
            model.stats.record_images(count, decode_ns, preprocess_ns)
        elif kind == "failure":
            model.stats.record_failure(int(args[0]), str(args[1]))
