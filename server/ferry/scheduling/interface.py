"""The one scheduler interface: what a model version queues its requests on, and the one message
it takes (``Execution``).

The dynamic batcher (``scheduler.Scheduler``), the Python-model runner
(``request_batches.RequestBatchScheduler``), the ensemble scheduler
(``ensembles.scheduler.EnsembleScheduler``) and the OCR model's (``ocr.scheduler.OcrScheduler``)
implement it, the last two through ``ComposingScheduler``; ``ModelVersion.scheduler`` holds it, so
the data plane, the model manager and ensemble steps use one declared type (as Triton core's
``Scheduler``), never a union found by probing attributes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from ..errors import FerryError, Unavailable
from ..types import Reserves
from .timeline import Timeline

if TYPE_CHECKING:
    from ..response_streams import ResponseSink
    from ..statistics import ModelStats

T = TypeVar("T")

Outputs = dict[str, np.ndarray]


@dataclass
class RequestTiming:
    """Where one request's time went (filled on success when the caller asks, e.g. an ensemble)."""

    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0


class Memory(Enum):
    """Where an execution's input tensors live: host memory (numpy arrays), or a torch device (a
    device pre-processor's output, ``preprocess { device: GPU }``, or a view of a client's CUDA
    shared memory region), which the batcher joins on the
    device (``gpu.device_tensors``) and hands to an engine that takes it (``Instance.takes_device_inputs``)
    without a host round trip, or decoded pixels that become such tensors once per batch (``PIXELS``)."""

    HOST = "host"
    DEVICE = "device"
    #: decoded images whose device pre-processing the batcher runs once per batch (``PendingPixels``)
    PIXELS = "pixels"


#: ``Memory.HOST`` as a module global, for the host path's checks: a global lookup, not an enum class
#: attribute's (17 against 98 ns measured on the shared CPU machine; two or three per request).
HOST = Memory.HOST


class PendingPixels(Protocol):
    """A ``Memory.PIXELS`` input (``pipelines.device_pixels.DevicePixels``)."""

    def gather(self, others: Sequence[Any]) -> Any:
        """This input and the same input of the batch's other executions, pre-processed in one call."""


@dataclass(slots=True)
class Execution:
    """One execution of a model: what the request path hands a scheduler (``submit``), the same
    for the dynamic batcher, the Python-model runner, an ensemble and the OCR model.

    ``inputs`` (batch first when the model batches, ``batch_size`` items) live in ``memory``;
    ``outputs`` are the ones asked for. ``priority`` and ``timeout_us`` follow the config's queue
    policies; ``timeline`` (a traced request) and ``timing`` (a composite's statistics) receive its
    durations. A decoupled model's execution carries a ``sink``: its responses go there as the
    model sends them. ``parameters`` are the request's, which a model's own code reads (a
    composite hands them to its steps, as Triton's); ``ticket`` is its admission, on which a
    composite counts what its stages will hold (an OCR page's detector maps, crops and
    recognition batches).

    Slotted, and never changed once built (a retry submits the same one): it replaces ten keyword
    arguments on the hot path, one small object per execution. Not ``frozen``: a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, which measured 4-5x
    the time of this one's (about 3.5 against 0.7 us for its eleven fields on the shared CPU
    machine), more than the batcher saves by keeping it instead of copying its fields.
    """

    inputs: Outputs
    outputs: list[str]
    batch_size: int = 1
    priority: int | None = None
    timeout_us: int | None = None
    timeline: Timeline | None = None
    timing: RequestTiming | None = None
    sink: ResponseSink | None = None
    parameters: Mapping[str, Any] | None = None
    ticket: Reserves | None = None
    memory: Memory = HOST
    #: outputs the caller writes into device memory (a CUDA shared memory region): an instance
    #: that makes them on its device hands them over there (``Instance.compute_keeping``)
    device_outputs: frozenset[str] = frozenset()


class BatchAnswers(Protocol):
    """Who takes the outcomes of a batch's requests together, instead of a future per request (the
    intake hand-off: one pass over the batch, its answers in one frame)."""

    def answer(self, outcomes: list[tuple[Any, Outputs | BaseException]]) -> None:
        """Each request's tag (what its caller queued it with) and its outputs or its error."""


class Answered(Protocol):
    """A request queued with ``ModelScheduler.enqueue_answered``: cancelling it answers it with
    ``CancelledError`` at once (a running batch's outcome for it is then dropped)."""

    def cancel(self) -> None: ...


class ModelScheduler(ABC):
    """Takes one model version's executions and answers each with its outputs (the executor port)."""

    #: Executions whose inputs are device tensors (``Memory.DEVICE``) are taken as they are; else
    #: the image stage brings a device pre-processor's output back to host memory first.
    takes_device_inputs: bool = False
    #: Whether ``enqueue_answered`` is offered: the scheduler queues requests itself and answers a
    #: batch's together (the dynamic batcher).
    answers_batches: bool = False

    @abstractmethod
    async def submit(self, execution: Execution) -> Outputs:
        """Answer one execution with the outputs it asks for (see ``Execution``)."""

    def enqueue(self, execution: Execution) -> asyncio.Future[Outputs]:
        """``submit`` without awaiting: a future of the outputs, whose cancelling cancels the
        execution. A scheduler that queues requests itself (the dynamic batcher) answers with its
        own future, so a caller holding many executions (the intake hand-off) makes no coroutine
        or task per execution; others run ``submit`` as a task. Errors found before queueing
        (the model is unloading, its queue is full) may be raised at once."""
        return asyncio.ensure_future(self.submit(execution))

    def enqueue_answered(self, execution: Execution, answers: BatchAnswers, tag: Any, signature: tuple) -> Answered:
        """Queue one execution whose outcome goes to ``answers`` with its batch's, tagged ``tag``
        (only where ``answers_batches``). ``signature`` is its batch signature, which the caller
        computed once for every request of the same shapes. Raises as ``enqueue`` does."""
        raise NotImplementedError(f"{type(self).__name__} answers no batches")

    @abstractmethod
    def start(self) -> None:
        """Begin serving (called once, when the version becomes READY)."""

    @abstractmethod
    async def stop(self, timeout: float | None = None) -> None:
        """Refuse new requests and finish the accepted ones (within ``timeout``)."""

    @abstractmethod
    def hurry(self) -> None:
        """The server is draining: stop waiting for requests that will not come."""

    def unready_reason(self) -> str:
        """Why the version cannot serve now although loaded ("" when it can)."""
        return ""

    @property
    @abstractmethod
    def queue_size(self) -> int:
        """Requests waiting in this scheduler's own queues."""

    @property
    @abstractmethod
    def in_flight(self) -> int:
        """Requests accepted and not yet answered."""


class ComposingScheduler(ModelScheduler):
    """A model that runs other models' schedulers (an ensemble, the OCR model): nothing queues
    here, so what it keeps is the bookkeeping of requests in flight, refusing new ones once
    stopping, the statistics of each request as a whole, and why it cannot serve (a composing
    model not READY, say: ``check_ready``)."""

    def __init__(self, name: str, stats: ModelStats) -> None:
        self.name = name
        self.stats = stats
        self._closing = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def queue_size(self) -> int:
        return 0  # requests wait in the composing models' queues, not here

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def closing(self) -> bool:
        """Whether it refuses new requests (it is being unloaded or the server stops)."""
        return self._closing

    def start(self) -> None:
        """Nothing to start: the composing models' schedulers do the work."""

    def hurry(self) -> None:
        """Nothing waits here: the composing models' batchers are hurried themselves."""

    async def stop(self, timeout: float | None = None) -> None:
        """Refuse new requests and wait (up to ``timeout``) for those running to finish; past it,
        the composing models' own schedulers fail what they cannot finish."""
        self._closing = True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)

    @abstractmethod
    def check_ready(self) -> None:
        """Raise a ``FerryError`` saying why the model cannot serve now."""

    def unready_reason(self) -> str:
        try:
            self.check_ready()
        except FerryError as exc:
            return exc.message
        return ""

    async def counted(self, work: Awaitable[T], started: int) -> T:
        """Await one request's ``work`` (started at ``started``, perf_counter_ns) as in flight; a
        failure or cancellation is recorded in the statistics. Refused once stopping."""
        if self._closing:
            if asyncio.iscoroutine(work):
                work.close()
            raise Unavailable(f"model '{self.name}' is unloading")
        self._in_flight += 1
        self._idle.clear()
        try:
            return await work
        except asyncio.CancelledError:
            self.stats.record_failure(time.perf_counter_ns() - started, "CANCELED")
            raise
        except FerryError as exc:
            reason = "REJECTED" if isinstance(exc, Unavailable) else "BACKEND"
            self.stats.record_failure(time.perf_counter_ns() - started, reason)
            raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    def record_success(
        self,
        started: int,
        spent: RequestTiming,
        batch_size: int,
        timeline: Timeline | None,
        timing: RequestTiming | None,
    ) -> None:
        """A request's statistics: its whole run as one compute stage of a traced ``timeline``,
        the sums of its composing models' queue and compute times (as Triton reports an
        ensemble's), added to the caller's ``timing`` too (an ensemble that runs this one)."""
        if timeline is not None:
            timeline.queue_start = timeline.compute_start = timeline.compute_input_end = started
            timeline.compute_output_start = timeline.compute_end = time.perf_counter_ns()
        self.stats.record_success(time.perf_counter_ns() - started, spent.queue_ns)
        self.stats.record_execution(
            batch_size, 1, spent.compute_input_ns, spent.compute_infer_ns, spent.compute_output_ns
        )
        if timing is not None:
            timing.queue_ns += spent.queue_ns
            timing.compute_input_ns += spent.compute_input_ns
            timing.compute_infer_ns += spent.compute_infer_ns
            timing.compute_output_ns += spent.compute_output_ns
