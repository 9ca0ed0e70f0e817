"""The one scheduler interface: what a model version queues its requests on.

The dynamic batcher (``scheduler.Scheduler``), the Python-model runner
(``request_batches.RequestBatchScheduler``) and the ensemble scheduler
(``ensembles.scheduler.EnsembleScheduler``) implement it; ``ModelVersion.scheduler`` holds it, so
the data plane, the model manager and ensemble steps use one declared type (as Triton core's
``Scheduler``), never a union found by probing attributes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .timeline import Timeline

if TYPE_CHECKING:
    from ..response_streams import ResponseSink

Outputs = dict[str, np.ndarray]


@dataclass
class RequestTiming:
    """Where one request's time went (filled on success when the caller asks, e.g. an ensemble)."""

    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0


class ModelScheduler(ABC):
    """Takes one model version's requests and answers each with its outputs."""

    @abstractmethod
    async def submit(
        self,
        inputs: Outputs,
        outputs: list[str],
        batch_size: int = 1,
        priority: int | None = None,
        timeout_us: int | None = None,
        timeline: Timeline | None = None,
        timing: RequestTiming | None = None,
        sink: ResponseSink | None = None,
    ) -> Outputs:
        """Run one request (``batch_size`` items when the model batches) and return the asked
        outputs. ``priority`` and ``timeout_us`` follow the config's queue policies; ``timeline``
        (a traced request) and ``timing`` (an ensemble's statistics) receive its durations. A
        decoupled model's request passes a ``sink``: its responses go there as the model sends them."""

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
