"""The model list as the dashboard shows it: repository state plus what each ready version runs on.

Everything comes from the data plane (the repository index and the loaded versions), so the page
agrees with ``POST /v2/repository/index`` and the model config API.
"""

from __future__ import annotations

from typing import Any

from ..api.dataplane import DataPlane
from ..errors import FerryError
from ..ocr import PLATFORM as OCR_PLATFORM
from ..repository.model import ModelVersion
from ..types import ControlMode


def _batching(model: ModelVersion) -> dict[str, Any] | None:
    if not model.config.HasField("dynamic_batching"):
        return None
    dynamic = model.config.dynamic_batching
    return {
        "max_queue_delay_us": dynamic.max_queue_delay_microseconds,
        "preferred_batch_sizes": list(dynamic.preferred_batch_size),
    }


def _version_details(model: ModelVersion) -> dict[str, Any]:
    """What a ready version runs on and how it batches."""
    return {
        "platform": model.platform,
        "max_batch_size": model.max_batch_size,
        "dynamic_batching": _batching(model),
        "instances": [{"name": i.spec.name, "kind": i.spec.kind, "device": i.device} for i in model.instances],
        "task": _task(model),
    }


def _task(model: ModelVersion) -> str | None:
    """The image endpoint the page's "try an image" sends to: the pipeline's task, ``ocr`` for an
    OCR model (it reads whole pages without an image pipeline of its own), None for tensor models."""
    if model.pipeline is not None:
        return model.pipeline.task
    return "ocr" if model.platform == OCR_PLATFORM else None


def models_overview(plane: DataPlane) -> dict[str, Any]:
    """Every model in the repository with its versions' states, and details for READY versions.

    ``repository_api`` tells the page whether load and unload requests can succeed at all (only in
    explicit control mode); whether this caller may send them is the server's auth to decide.
    """
    models: dict[str, dict[str, Any]] = {}
    for row in plane.repository_index():
        entry = models.setdefault(row["name"], {"name": row["name"], "versions": []})
        if not row.get("version") and not row.get("state"):
            continue  # in the repository, never loaded
        version: dict[str, Any] = {
            "version": row.get("version", ""),
            "state": row.get("state", ""),
            "reason": row.get("reason", ""),
        }
        if version["state"] == "READY":
            try:
                version.update(_version_details(plane.model(row["name"], version["version"])))
            except FerryError:  # unloaded between the index and this lookup: report the state only
                version["state"] = "UNAVAILABLE"
        entry["versions"].append(version)
    mode = plane.manager.control_mode
    return {"control_mode": mode.value, "repository_api": mode == ControlMode.EXPLICIT, "models": list(models.values())}
