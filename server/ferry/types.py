"""Types every layer shares: the protocol-neutral request and response that flow between front doors
and the data plane, a tensor as a model config declares it, and the repository's control mode.

They live here, beneath every package, so that ``pipelines``, ``ensembles`` and ``backends`` never
import ``repository`` (which imports them) and ``ferry.settings`` stays light."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: importing the settings (which use ControlMode) stays light
    import numpy as np

#: The identity of every caller of a server without auth (``security/identity.py``).
ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class SharedMemoryRef:
    """Where a tensor lives in a registered shared memory region (offset is within the region)."""

    region: str
    offset: int
    byte_size: int


@dataclass(frozen=True)
class SharedMemoryInput:
    """An input the client left in shared memory: its declared type and shape, and where it is."""

    datatype: str
    shape: tuple[int, ...]
    ref: SharedMemoryRef


class Reserves(Protocol):
    """A request's admission (``api.admission.Ticket``), as the stages below the front doors see
    it: what they will hold is counted on it when it becomes real (an image's decoding peak, the
    hand-off's copy of the inputs)."""

    def reserve(self, nbytes: int) -> None: ...

    def hold(self, nbytes: int) -> Callable[[], None]: ...

    def hold_engine(self, nbytes: int) -> Callable[[], None]:
        """Count an engine's working memory while an execution runs (its own budget)."""
        ...

    @property
    def own(self) -> int:
        """The bytes counted for this request so far (an intake hands them on with the request)."""
        ...


@dataclass
class RequestedOutput:
    """An output the caller asked for, with how it wants it back."""

    name: str
    binary: bool | None = None  # None: the request-wide default
    classification: int = 0  # Triton's classification extension: top-k as "score:index:label"
    shared_memory: SharedMemoryRef | None = None  # write the output there instead of into the response


#: Request parameters that only say how the answer is sent (binary or JSON; on a stream, whether an
#: empty final response ends it: perf_analyzer's gRPC requests carry that one): a request carrying no
#: others is one plain execution as far as the model and its queue are concerned
#: (``inference.plain_plans``).
ANSWER_PARAMETERS = frozenset({"binary_data_output", "triton_enable_empty_final_response"})


@dataclass
class InferenceRequest:
    """One inference call: named numpy inputs (already decoded from the wire) and what to return."""

    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    input_datatypes: dict[str, str] = field(default_factory=dict)
    outputs: list[RequestedOutput] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    shared_memory_inputs: dict[str, SharedMemoryInput] = field(default_factory=dict)
    client: str = ANONYMOUS  # who sent it: the shared memory regions it may use are this identity's
    #: The inputs the server itself made: a model's pre-stage from encoded images (here or in an
    #: intake process), an OCR page's steps. Bounded where they were made (``max_pixels``,
    #: ``max_detector_pixels``), so the variable-size bound skips them; a client's tensor never is one.
    preprocessed: frozenset[str] = frozenset()
    #: Inputs that are torch tensors on a device viewing a client's CUDA shared memory region (the
    #: data plane's, for a model whose scheduler takes device inputs); the other inputs are placed
    #: beside them. Client tensors all the same: validated and bounded as any.
    device_inputs: frozenset[str] = frozenset()
    #: Outputs asked into a CUDA region that an engine making them on its device may hand over as
    #: device tensors, copied into the region on the device (``api.shared_memory.write``).
    device_outputs: frozenset[str] = frozenset()
    #: the admission the front door took for it (None for a request not admitted: a Python model's exec())
    ticket: Reserves | None = field(default=None, repr=False, compare=False)
    #: the memory its REST body was received into (``api.received_body``), of which its binary
    #: tensors are views: an intake hands an arena block on where it lies instead of copying it
    received: object | None = field(default=None, repr=False, compare=False)

    @property
    def binary_output_default(self) -> bool:
        return bool(self.parameters.get("binary_data_output", False))


@dataclass
class OutputTensor:
    name: str
    datatype: str
    data: np.ndarray
    binary: bool = False
    shared_memory: dict[str, Any] | None = None  # the output went to shared memory: these parameters say where


@dataclass
class InferenceResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[OutputTensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)


class ControlMode(str, enum.Enum):
    """How the model repository is managed (Triton's ``--model-control-mode``)."""

    NONE = "none"
    EXPLICIT = "explicit"
    POLL = "poll"


@dataclass(frozen=True)
class TensorSpec:
    """An input or output as the config declares it (dims exclude the batch dimension)."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    optional: bool = False
    label_filename: str = ""
    reshape: tuple[int, ...] | None = None

    def full_shape(self, batched: bool) -> tuple[int, ...]:
        return (-1, *self.dims) if batched else self.dims
