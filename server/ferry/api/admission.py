"""Server-wide admission: caps on requests in flight and on the bytes they hold.

Per-model queues may be unbounded (Triton's default), so this is the one bound that covers every
queue, the image worker pool and request bodies alike: past it a request is refused at once with
503 + Retry-After / UNAVAILABLE, before its body is even read, and memory stays bounded however
hard clients push. Everything runs on the event loop thread, so plain counters suffice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..errors import Unavailable

RETRY_AFTER_S = 1


class Admission:
    """Counts admitted requests and bytes; ``admit`` refuses what would exceed either cap (0 = none)."""

    def __init__(self, max_requests: int = 0, max_bytes: int = 0) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        self.rejected = 0

    @contextlib.contextmanager
    def admit(self, nbytes: int = 0) -> Iterator[None]:
        """Hold one request slot and ``nbytes`` for the duration of the block."""
        if self.max_requests and self.requests >= self.max_requests:
            self.rejected += 1
            raise Unavailable(
                f"server overloaded: {self.requests} requests in flight (limit "
                f"{self.max_requests}, --max-inflight-requests); retry later",
                retry_after=RETRY_AFTER_S,
            )
        # one request is always let in, however large, so a lone big request is never refused here
        if self.max_bytes and self.requests and self.bytes + nbytes > self.max_bytes:
            self.rejected += 1
            raise Unavailable(
                f"server overloaded: requests in flight hold {self.bytes} bytes and this one "
                f"{nbytes} (limit {self.max_bytes}, --max-inflight-bytes); retry later",
                retry_after=RETRY_AFTER_S,
            )
        self.requests += 1
        self.bytes += nbytes
        try:
            yield
        finally:
            self.requests -= 1
            self.bytes -= nbytes


class AdmissionCollector(Collector):
    """Exports the admission counters, so operators (and tests) see the caps at work."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    def collect(self) -> Iterable[Metric]:
        a = self._admission
        yield GaugeMetricFamily("ferry_inflight_requests", "Requests admitted and not yet answered", value=a.requests)
        yield GaugeMetricFamily("ferry_inflight_bytes", "Request bytes held by admitted requests", value=a.bytes)
        yield CounterMetricFamily(
            "ferry_admission_rejected", "Requests refused by the in-flight caps (503/UNAVAILABLE)", value=a.rejected
        )
