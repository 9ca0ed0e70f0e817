"""Server-wide admission: caps on requests in flight and on the bytes they hold.

Per-model queues may be unbounded (Triton's default), so this is the one bound that covers every
queue, the image worker pool and request bodies alike: past it a request is refused with
503 + Retry-After / UNAVAILABLE (at once, before its body is read, when the cap is already full),
and memory stays bounded however hard clients push. Everything runs on the event loop thread,
so plain counters suffice; with several intake processes each process adds to its own row of a
shared table (``intake/shared_state.py``) and the caps apply to the sum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..errors import PayloadTooLarge, Unavailable
from ..heap import HeapTrimmer

RETRY_AFTER_S = 1

REQUESTS, BYTES, REJECTED = 0, 1, 2  # the counters, by index


class Counts(Protocol):
    """Where admission keeps its counters: this process's add, the whole server's total."""

    def add(self, counter: int, delta: int) -> None: ...

    def total(self, counter: int) -> int: ...


class LocalCounts:
    """Counters of a server that runs in one process."""

    def __init__(self) -> None:
        self._values = [0, 0, 0]

    def add(self, counter: int, delta: int) -> None:
        self._values[counter] += delta

    def total(self, counter: int) -> int:
        return self._values[counter]


class Ticket:
    """One admitted request's slot and share of the byte cap: grows as its real cost becomes known,
    and is given back by ``close()`` (or leaving its ``with`` block).

    A plain object, not a generator-based context manager: one is made per request, and a request
    often hands its ``close`` on (to be called once its answer is written)."""

    __slots__ = ("_admission", "nbytes", "held", "closed", "slot", "elsewhere")

    def __init__(self, admission: Admission, nbytes: int, slot: bool = True, elsewhere: int = 0) -> None:
        self._admission = admission
        self.nbytes = nbytes
        self.held = 0  # bytes of ``hold``s not yet released
        self.closed = False
        self.slot = slot  # whether it holds a request slot (not a handed-off request's: its intake's does)
        self.elsewhere = elsewhere  # bytes its intake's ticket counts for the same request

    @property
    def own(self) -> int:
        """Bytes this request holds, in this process and in the intake that handed it off."""
        return self.nbytes + self.held + self.elsewhere

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Give the slot and every byte counted back (once; later calls do nothing)."""
        if self.closed:
            return
        self.closed = True
        admission = self._admission
        if self.slot:
            admission.counts.add(REQUESTS, -1)
        admission.uncount(self.nbytes)

    def reserve(self, nbytes: int) -> None:
        """Count ``nbytes`` more (bytes received, decompressed, decoded or about to be encoded);
        raises Unavailable if that would pass the cap while other requests hold bytes too, and
        PayloadTooLarge if this request alone would need more than the cap (it could never fit)."""
        if self.closed:  # the request was answered; nothing it does now holds memory for long
            return
        self._check(nbytes)
        self.nbytes += nbytes
        self._admission.counts.add(BYTES, nbytes)

    def hold(self, nbytes: int) -> Callable[[], None]:
        """Count ``nbytes`` that may outlive this request (a block handed to another process, given
        back when that process answers, even after a cancelled request ended): refused like
        ``reserve`` while the request runs, counted until the returned function is called."""
        if self.closed:
            return self._admission.hold(nbytes)
        self._check(nbytes)
        self.held += nbytes  # this request's own, for _check, while it holds them
        uncount: Callable[[], None] | None = self._admission.hold(nbytes)

        def release() -> None:
            nonlocal uncount
            if uncount is not None:
                self.held -= nbytes
                uncount()
                uncount = None

        return release

    def _check(self, nbytes: int) -> None:
        """Raise if ``nbytes`` more would pass the cap (see ``reserve``)."""
        a = self._admission
        own = self.own
        if a.max_bytes and own + nbytes > a.max_bytes:
            a.count_rejection()
            raise PayloadTooLarge(
                f"this request needs {own + nbytes} bytes in flight (its body, what decoding makes of it "
                f"and its answer while encoded), more than the limit of {a.max_bytes} (--max-inflight-bytes); "
                "send less per request, or binary answers"
            )
        held = a.bytes
        if a.max_bytes and held - own > 0 and held + nbytes > a.max_bytes:
            a.count_rejection()
            raise Unavailable(
                f"server overloaded: requests in flight hold {held} bytes and this one needs "
                f"{nbytes} more (limit {a.max_bytes}, --max-inflight-bytes); retry later",
                retry_after=RETRY_AFTER_S,
            )

    def hold_engine(self, nbytes: int) -> Callable[[], None]:
        """Count ``nbytes`` of an engine's working memory while one of this request's executions
        runs (see ``Admission.engine``); counted until the returned function is called."""
        try:
            return self._admission.engine.hold(nbytes)
        except (PayloadTooLarge, Unavailable):
            self._admission.count_rejection()
            raise

    def release(self, nbytes: int) -> None:
        """Count ``nbytes`` less: a copy that was reserved is gone (the pieces a body was joined from)."""
        nbytes = min(nbytes, self.nbytes)
        if self.closed or nbytes <= 0:
            return
        self.nbytes -= nbytes
        self._admission.uncount(nbytes)


class EngineMemory:
    """What the engines of this process hold while they run (ONNX Runtime's buffers: a model's
    ``working_memory_factor`` times an execution's input bytes), a budget apart from the request
    bytes of ``--max-inflight-bytes``: those bound what clients send and what decoding makes of it,
    this bounds what running models add to it. An OCR detector holds 14 bytes per byte of its
    input, so sharing one budget would refuse a two-line page enlarged to 736 x 2636 (330 MB)
    under the 256 MiB default, and a budget large enough for that would let request bodies hold as
    much. Only the model process runs engines, so a plain counter suffices."""

    def __init__(self, max_bytes: int = 0) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0

    def hold(self, nbytes: int) -> Callable[[], None]:
        """Count ``nbytes`` until the returned function is called: 413 when they alone pass the cap
        (they could never fit), 503 when executions already running hold too much for them."""
        if self.max_bytes and nbytes > self.max_bytes:
            raise PayloadTooLarge(
                f"more than the limit of {self.max_bytes} bytes of engine working memory "
                "(--max-engine-memory-bytes); send a smaller input, or raise the limit"
            )
        if self.max_bytes and self.bytes and self.bytes + nbytes > self.max_bytes:
            raise Unavailable(
                f"server overloaded: running executions hold {self.bytes} bytes of engine working memory "
                f"(limit {self.max_bytes}, --max-engine-memory-bytes); retry later",
                retry_after=RETRY_AFTER_S,
            )
        self.bytes += nbytes
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.bytes -= nbytes

        return release


class Admission:
    """Counts admitted requests and the bytes they hold; refuses what would exceed either cap (0 = none).

    Bytes are counted as they become real (received, decompressed, decoded, about to be encoded),
    never from what a client declares, so a ``Content-Length`` that never arrives costs nothing.
    """

    def __init__(
        self, max_requests: int = 0, max_bytes: int = 0, counts: Counts | None = None, max_engine_bytes: int = 0
    ) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.counts: Counts = counts or LocalCounts()
        self.engine = EngineMemory(max_engine_bytes)
        self.heap = HeapTrimmer()  # what requests free goes back to the system (see ferry.heap)

    @property
    def requests(self) -> int:
        return self.counts.total(REQUESTS)

    @property
    def bytes(self) -> int:
        return self.counts.total(BYTES)

    @property
    def rejected(self) -> int:
        return self.counts.total(REJECTED)

    def count_rejection(self) -> None:
        self.counts.add(REJECTED, 1)

    def uncount(self, nbytes: int) -> None:
        """``nbytes`` counted are freed."""
        self.counts.add(BYTES, -nbytes)
        self.heap.released(nbytes)

    def check_room(self, nbytes: int) -> None:
        """Refuse at once, before reading a body, a request whose announced size cannot fit now."""
        held = self.bytes
        if self.max_bytes and self.requests and held + nbytes > self.max_bytes:
            self.count_rejection()
            raise Unavailable(
                f"server overloaded: requests in flight hold {held} bytes and this one needs "
                f"{nbytes} (limit {self.max_bytes}, --max-inflight-bytes); retry later",
                retry_after=RETRY_AFTER_S,
            )

    def hold(self, nbytes: int) -> Callable[[], None]:
        """Count ``nbytes`` already built (an answer waiting to be written) until the returned
        function is called; never refused, since refusing would only drop what is already spent."""
        self.counts.add(BYTES, nbytes)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.uncount(nbytes)

        return release

    def admit(self, nbytes: int = 0) -> Ticket:
        """Hold one request slot, and ``nbytes`` plus what the ticket reserves, until the ticket is
        closed (``with admission.admit() as ticket:``, or ``ticket.close`` handed on)."""
        requests = self.requests
        if self.max_requests and requests >= self.max_requests:
            self.count_rejection()
            raise Unavailable(
                f"server overloaded: {requests} requests in flight (limit "
                f"{self.max_requests}, --max-inflight-requests); retry later",
                retry_after=RETRY_AFTER_S,
            )
        # one request is always let in here, however large its announced body (the body limits bound
        # that); what it then needs beyond the cap is refused by Ticket.reserve
        self.check_room(nbytes)
        ticket = Ticket(self, nbytes)
        self.counts.add(REQUESTS, 1)
        self.counts.add(BYTES, nbytes)
        return ticket

    def handed_off(self, elsewhere: int) -> Ticket:
        """The model process's ticket for a request an intake process admitted and handed off (its
        slot and the ``elsewhere`` bytes its ticket counts stay there): what the model process then
        holds for it (images it decodes, an engine's working memory) is counted and refused here
        as the intake's ticket would, a request that alone cannot fit with 413."""
        return Ticket(self, 0, slot=False, elsewhere=elsewhere)


class AdmissionCollector(Collector):
    """Exports the admission counters, so operators (and tests) see the caps at work."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    def collect(self) -> Iterable[Metric]:
        a = self._admission
        yield GaugeMetricFamily("ferry_inflight_requests", "Requests admitted and not yet answered", value=a.requests)
        yield GaugeMetricFamily("ferry_inflight_bytes", "Request bytes held by admitted requests", value=a.bytes)
        yield GaugeMetricFamily(
            "ferry_engine_memory_bytes",
            "Engines' working memory counted for running executions (--max-engine-memory-bytes)",
            value=a.engine.bytes,
        )
        yield CounterMetricFamily(
            "ferry_admission_rejected", "Requests refused by the in-flight caps (503/UNAVAILABLE)", value=a.rejected
        )
