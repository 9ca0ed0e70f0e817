"""The models as an intake process sees them: one ``ModelVersion`` per load the model process
serves, built from its description (``model_directory``) with the same ``ImagePipeline`` the
model process built, so the intake runs the very same stages. Keyed by the load's identity (name,
version, load generation): a reloaded model is described again, never pre-processed with the
previous load's pipeline.

An intake's version has no engine and no scheduler of its own (``ElsewhereScheduler``): its
executions go to the model process (``front_half.HandoffPath``). What its stages record in its
statistics (images decoded, requests refused as invalid) is sent to the model process's
statistics of that load (``RemoteStats``).
"""

from __future__ import annotations

import base64
import logging
import time
from pathlib import Path
from typing import Any

from ferry_client.protocol import model_config_pb2 as mc

from ..pipelines.runtime import ImagePipeline
from ..repository.model import ModelVersion, config_tensors, new_version
from ..scheduling.interface import Execution, ModelScheduler, Outputs
from ..statistics import ModelStats
from .handoff import HandoffClient

log = logging.getLogger("ferry.intake")


class ElsewhereScheduler(ModelScheduler):
    """The scheduler of a model that runs in the model process: nothing is queued here."""

    async def submit(self, execution: Execution) -> Outputs:
        raise RuntimeError("an intake process hands executions to the model process (HandoffPath)")

    def start(self) -> None:
        pass

    async def stop(self, timeout: float | None = None) -> None:
        pass

    def hurry(self) -> None:
        pass

    @property
    def queue_size(self) -> int:
        return 0

    @property
    def in_flight(self) -> int:
        return 0


class RemoteStats(ModelStats):
    """Statistics whose image and failure records go to the model process's load ``identity``."""

    def __init__(self, name: str, version: str, client: HandoffClient, identity: str) -> None:
        super().__init__(name, version)
        self._client = client
        self._identity = identity

    def record_images(self, count: int, decode_ns: int, preprocess_ns: int) -> None:
        self._client.record(self._identity, "images", [count, decode_ns, preprocess_ns])

    def record_failure(self, request_ns: int, reason: str) -> None:
        self._client.record(self._identity, "failure", [request_ns, reason])


class ModelViews:
    """The loads an intake pre-processes for, by the (name, version) clients ask for."""

    def __init__(self, client: HandoffClient) -> None:
        self._client = client
        self._views: dict[tuple[str, str], tuple[str, ModelVersion | None]] = {}

    async def resolve(self, name: str, version: str) -> ModelVersion | None:
        """The load serving (name, version) now, asked of the model process (one small round trip;
        its errors are one process's); None when its image requests must be relayed."""
        known = self._views.get((name, version))
        description = await self._client.describe(name, version, known[0] if known else "")
        if known is not None and description["identity"] == known[0]:
            return known[1]
        view = None if description["relay"] else self._build(description)
        self._views[(name, version)] = (description["identity"], view)
        return view

    def current(self, name: str, version: str) -> ModelVersion | None:
        """The load ``resolve`` last found (no round trip)."""
        known = self._views.get((name, version))
        return known[1] if known is not None else None

    def _build(self, description: dict[str, Any]) -> ModelVersion | None:
        identity = description["identity"]
        config = mc.ModelConfig.FromString(base64.b64decode(description["config"]))
        labels = {name: list(values) for name, values in description["labels"].items()}
        source = f"model '{config.name}' as described by the model process"
        try:
            inputs, outputs = config_tensors(config, source)
            pipeline = ImagePipeline.from_config(config, inputs, outputs, labels, on_device=False)
        except Exception:  # it loaded there: relaying is always right
            log.exception("cannot build the image pipeline of %s here; relaying its image requests", source)
            return None
        version = int(description["version"])
        stats = RemoteStats(config.name, str(version), self._client, identity)
        return new_version(
            config,
            version,
            Path(description["model_dir"]),
            time.perf_counter(),
            lambda _: ElsewhereScheduler(),
            source,
            pipeline=pipeline,
            seen_from=(labels, stats, int(description["generation"])),
        )
