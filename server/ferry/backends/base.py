"""The contract between the server and an engine: inspect a model, create instances, run batches."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc


@dataclass(frozen=True)
class TensorInfo:
    """An input or output as the engine sees it; ``None`` dims are dynamic."""

    name: str
    datatype: str | None  # None: a type the V2 protocol cannot carry
    shape: tuple[int | None, ...]
    engine_type: str = ""


@dataclass(frozen=True)
class ModelIO:
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]


@dataclass(frozen=True)
class InstanceSpec:
    """Where one model instance runs: its name, kind (CPU/GPU) and device, and its thread budget."""

    name: str
    kind: str  # "CPU" or "GPU"
    device_id: int = 0
    threads: int = 0  # intra-op threads; 0 lets the engine decide
    extra: dict[str, str] = field(default_factory=dict)


class Instance(Protocol):
    """One loaded copy of a model on one device. ``run`` is called from a worker thread."""

    spec: InstanceSpec
    io: ModelIO
    device: str  # e.g. "cpu", "cuda:0", for reporting

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


class Backend(Protocol):
    """Creates instances of one platform's models."""

    platform: str
    default_filename: str

    def create_instance(
        self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec
    ) -> Instance: ...
