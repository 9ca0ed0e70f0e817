"""The contract between the server and an engine: inspect a model, create instances, compute batches."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

#: Batches an instance that ``overlaps_batches`` may have in flight (launched, not yet finished), each
#: in its own buffer set: its inputs are assembled in set ``slot`` (0 or 1) while the other one's
#: batch computes.
BATCHES_IN_FLIGHT = 2


def config_parameter(config: mc.ModelConfig, key: str) -> str | None:
    """A ``parameters { key: ... value: { string_value: ... } }`` entry of the config, if present."""
    if key in config.parameters:
        return config.parameters[key].string_value
    return None


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
    #: The model file's own key/value metadata (ONNX ``metadata_props``: Ultralytics keeps its class names there).
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InstanceSpec:
    """Where one model instance runs: its name, kind (CPU/GPU) and device, and its thread budget."""

    name: str
    kind: str  # "CPU" or "GPU"
    device_id: int = 0
    threads: int = 0  # intra-op threads; 0 lets the engine decide
    extra: dict[str, str] = field(default_factory=dict)


class Instance(ABC):
    """One loaded copy of a model on one device. ``compute`` (one batch through the engine) is called
    from a worker thread, or inline on the event loop (``inline_when_fast``).

    What an instance may offer beyond ``compute`` is declared here, with the default that asks for
    nothing, so the scheduler reads it as an attribute and never probes: ``inline_when_fast``,
    ``takes_device_inputs``, ``compute_keeping``, ``input_buffer`` and ``overlaps_batches`` (``launch`` /
    ``finish``).
    """

    spec: InstanceSpec
    io: ModelIO
    device: str  # e.g. "cpu", "cuda:0", for reporting
    #: ``compute`` waits on nothing but the engine (no sleep, no I/O), so the scheduler may compute a
    #: batch it expects to be fast on the event loop's thread (``scheduling.scheduler.INLINE_BELOW_NS``).
    inline_when_fast: bool = False
    #: ``compute`` takes torch tensors on a device as inputs (``scheduling.interface.Memory.DEVICE``,
    #: a device pre-processor's batch) as well as host arrays; else the scheduler copies them to host.
    takes_device_inputs: bool = False
    #: A batch can be computed in two calls, ``launch`` (enqueue it on the device, return at once) and
    #: ``finish`` (wait for it): the scheduler launches the next batch before finishing this one, so
    #: the next batch's assembly and copy overlap this one's compute (at most ``BATCHES_IN_FLIGHT``).
    overlaps_batches: bool = False

    @abstractmethod
    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]: ...

    def compute_keeping(self, inputs: dict[str, Any], outputs: list[str], kept: frozenset[str]) -> dict[str, Any]:
        """``compute``, with the outputs ``kept`` left on the device where the engine makes them there
        (torch tensors of their own memory), for a caller that copies them into device memory (a
        CUDA shared memory region: ``Execution.device_outputs``). By default every output comes
        back in host memory, as from ``compute``."""
        return self.compute(inputs, outputs)

    @abstractmethod
    def close(self) -> None: ...

    def input_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype, slot: int = 0) -> np.ndarray | None:
        """The memory a batch input ``name`` is assembled in, or ``None``: the scheduler's own
        staging memory. A GPU instance returns a view of its page-locked host buffer, so requests
        are concatenated straight into memory the device can copy from asynchronously; one per
        ``slot``, so a batch in flight still reads its own while the next is assembled."""
        return None

    def launch(
        self, inputs: dict[str, Any], outputs: list[str], slot: int = 0, kept: frozenset[str] = frozenset()
    ) -> Any:
        """Start a batch whose inputs may lie in buffer set ``slot`` and return what ``finish`` waits
        on, without waiting (only for an instance that declares ``overlaps_batches``); ``finish``
        hands the outputs ``kept`` over on the device, as ``compute_keeping`` does."""
        raise NotImplementedError(f"{type(self).__name__} does not overlap batches")

    def finish(self, launched: Any) -> dict[str, Any]:
        """The outputs of a launched batch, once computed (in host memory the caller may keep, but
        those it was asked to keep on the device)."""
        raise NotImplementedError(f"{type(self).__name__} does not overlap batches")


class RequestBatchInstance(Instance):
    """An instance that computes a batch as its separate requests instead of one tensor batch.

    Python models answer each request of a batch on its own (Triton's ``execute(requests)``), so the
    scheduler (``scheduling.request_batches``) hands them the requests unconcatenated and gets one
    result per request back: outputs, or the error that fails that request alone.
    """

    @abstractmethod
    def compute_requests(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        sinks: list[Any] | None = None,
        parameters: list[dict[str, Any]] | None = None,
    ) -> Sequence[dict[str, np.ndarray] | Exception]:
        """``sinks`` (one ``response_streams.ResponseStream`` per request) only for a decoupled model;
        ``parameters``: each request's parameters, which the model reads (``request.parameters()``)."""


class Backend(Protocol):
    """Creates instances of one platform's models."""

    platform: str
    name: str  # Triton's backend name, e.g. "onnxruntime"
    default_filename: str
    #: The instances compute a batch as its separate requests (``RequestBatchInstance``: Python models), so
    #: the version gets the Python-model runner instead of the tensor-concatenating batcher.
    request_batches: bool = False

    def model_filename(self, config: mc.ModelConfig) -> str:
        """The file to load from a version directory: the config's ``default_model_filename``, else
        the platform's default (backends that choose differently override this)."""
        return config.default_model_filename or self.default_filename

    def gpu_available(self) -> bool:
        """Whether this engine can run on a GPU here (what KIND_AUTO resolves against)."""
        ...

    def create_instance(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> Instance: ...
