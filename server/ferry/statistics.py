"""Per-model-version counters and durations in the shape of Triton's statistics extension.

The scheduler and the data plane record into one ``ModelStats`` per version; the statistics API
(REST and gRPC) and the Prometheus exporter both read it, so they can never disagree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class Observer(Protocol):
    def observe(self, value: float) -> None: ...

    def observe_all(self, values: Iterable[float]) -> None: ...


@dataclass
class Histograms:
    """Prometheus histogram children for one model version (set by the metrics module)."""

    request_us: Observer
    queue_us: Observer
    compute_input_us: Observer
    compute_infer_us: Observer
    compute_output_us: Observer
    batch_size: Observer


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


_INFER_FIELDS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
_BATCH_FIELDS = ("compute_input", "compute_infer", "compute_output")
#: Triton's per-response statistics of a decoupled model, keyed by the response's index.
RESPONSE_OUTCOMES = ("success", "fail", "empty_response", "cancel")
_RESPONSE_FIELDS = ("compute_infer", "compute_output", *RESPONSE_OUTCOMES)
#: Response indexes kept apart (later responses of very long streams add to the totals only),
#: so a stream of a million responses cannot grow the statistics without bound.
MAX_RESPONSE_INDEXES = 1024


@dataclass
class ModelStats:
    """Cumulative statistics of one model version; thread-safe because workers record from threads."""

    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0  # batch items inferred (a batch of 8 counts 8)
    execution_count: int = 0  # engine executions (a batch of 8 counts 1)
    images: dict[str, Duration] = field(default_factory=lambda: {"decode": Duration(), "preprocess": Duration()})
    failures: dict[str, int] = field(default_factory=dict)  # by reason: REJECTED, CANCELED, BACKEND, OTHER
    histograms: Histograms | None = field(default=None, repr=False)
    infer: dict[str, Duration] = field(default_factory=lambda: {k: Duration() for k in _INFER_FIELDS})
    batches: dict[int, dict[str, Duration]] = field(default_factory=dict)
    responses: dict[int, dict[str, Duration]] = field(default_factory=dict)  # decoupled models only
    response_totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESPONSE_OUTCOMES, 0))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_success(self, request_ns: int, queue_ns: int) -> None:
        self.record_successes([(request_ns, queue_ns)])

    def record_successes(self, durations: Sequence[tuple[int, int]]) -> None:
        """Successful requests (``(request_ns, queue_ns)`` each), e.g. a batch's, under one lock."""
        if not durations:
            return
        count = len(durations)
        request_total = sum(request_ns for request_ns, _ in durations)
        queue_total = sum(queue_ns for _, queue_ns in durations)
        with self._lock:
            self.infer["success"].add(request_total, count)
            self.infer["queue"].add(queue_total, count)
            self.last_inference_ms = int(time.time() * 1000)
        if self.histograms is not None:  # each request's own value, a batch's under one lock
            self.histograms.request_us.observe_all([request_ns / 1000 for request_ns, _ in durations])
            self.histograms.queue_us.observe_all([queue_ns / 1000 for _, queue_ns in durations])

    def record_cache_hit(self, request_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a success that never queued or executed."""
        with self._lock:
            self.infer["success"].add(request_ns)
            self.infer["cache_hit"].add(lookup_ns)
            self.last_inference_ms = int(time.time() * 1000)
        if self.histograms is not None:
            self.histograms.request_us.observe(request_ns / 1000)

    def record_cache_miss(self, ns: int) -> None:
        """A request the cache could not answer; ``ns`` is the lookup plus the insertion of its result."""
        with self._lock:
            self.infer["cache_miss"].add(ns)

    def record_images(self, count: int, decode_ns: int, preprocess_ns: int) -> None:
        """Decoding and pre-processing time of ``count`` images sent to the image pipeline."""
        with self._lock:
            self.images["decode"].add(decode_ns, count)
            self.images["preprocess"].add(preprocess_ns, count)

    def record_failure(self, request_ns: int, reason: str) -> None:
        """A failed request; ``reason`` is Triton's failure label (REJECTED, CANCELED, BACKEND, OTHER)."""
        with self._lock:
            self.infer["fail"].add(request_ns)
            self.failures[reason] = self.failures.get(reason, 0) + 1
            self.last_inference_ms = int(time.time() * 1000)

    def record_execution(self, batch_size: int, requests: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """One engine execution of ``batch_size`` items gathered from ``requests`` requests."""
        with self._lock:
            self.execution_count += 1
            self.inference_count += batch_size
            # Triton counts compute durations once per request, batch stats once per execution.
            self.infer["compute_input"].add(input_ns * requests, requests)
            self.infer["compute_infer"].add(infer_ns * requests, requests)
            self.infer["compute_output"].add(output_ns * requests, requests)
            per_batch = self.batches.get(batch_size)
            if per_batch is None:
                per_batch = self.batches[batch_size] = {k: Duration() for k in _BATCH_FIELDS}
            per_batch["compute_input"].add(input_ns)
            per_batch["compute_infer"].add(infer_ns)
            per_batch["compute_output"].add(output_ns)
        if self.histograms is not None:
            self.histograms.batch_size.observe(batch_size)
            self.histograms.compute_input_us.observe(input_ns / 1000)
            self.histograms.compute_infer_us.observe(infer_ns / 1000)
            self.histograms.compute_output_us.observe(output_ns / 1000)

    def record_response(self, index: int, outcome: str, infer_ns: int, output_ns: int = 0) -> None:
        """One response of a decoupled model's request (``outcome`` in RESPONSE_OUTCOMES), as
        Triton's Python backend counts it: ``infer_ns`` from the request's previous response (or
        its start) until the model sent this one, ``output_ns`` from then until the response was
        ready for the client. A success or failure counts both (its outcome their sum), an empty
        response its compute time only, a cancel (``infer_ns``: the time since the last response)
        neither."""
        with self._lock:
            self.response_totals[outcome] += 1
            if index >= MAX_RESPONSE_INDEXES:
                return
            per_index = self.responses.get(index)
            if per_index is None:
                per_index = self.responses[index] = {k: Duration() for k in _RESPONSE_FIELDS}
            if outcome in ("success", "fail"):
                per_index["compute_infer"].add(infer_ns)
                per_index["compute_output"].add(output_ns)
                per_index[outcome].add(infer_ns + output_ns)
            elif outcome == "empty_response":
                per_index["compute_infer"].add(infer_ns)
                per_index[outcome].add(infer_ns)
            else:
                per_index[outcome].add(infer_ns)

    def snapshot(self) -> dict[str, Any]:
        """Counters for the metrics exporter, read under the lock so they are consistent."""
        with self._lock:
            return {
                "success": self.infer["success"].count,
                "failures": dict(self.failures),
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "responses": dict(self.response_totals),
                "images": {k: d.as_dict() for k, d in self.images.items()},
                "cache": {k: self.infer[k].as_dict() for k in ("cache_hit", "cache_miss")},
                "durations_ns": {
                    k: self.infer[k].ns
                    for k in ("success", "queue", "compute_input", "compute_infer", "compute_output")
                },
            }

    def as_dict(self) -> dict:
        """Triton's JSON statistics shape (``model_stats`` entries)."""
        with self._lock:
            return {
                "name": self.name,
                "version": self.version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {k: d.as_dict() for k, d in self.infer.items()},
                "batch_stats": [
                    {"batch_size": size, **{k: d.as_dict() for k, d in durations.items()}}
                    for size, durations in sorted(self.batches.items())
                ],
                "memory_usage": [],
                "response_stats": {
                    str(index): {k: d.as_dict() for k, d in durations.items()}
                    for index, durations in sorted(self.responses.items())
                },
            }
