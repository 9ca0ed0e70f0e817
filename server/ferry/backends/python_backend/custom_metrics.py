"""Custom metrics from Python models (Triton's ``pb_utils.MetricFamily`` / ``Metric``) on /metrics.

A model creates a family (name, description, kind) and metrics in it, one per label set; their
values live in a process-wide store that the server's Prometheus registry reads at scrape time
(``CustomMetricsCollector``). Semantics follow Triton: a family name is shared by every model
(same name and kind give the same family, whose first description stays; another kind is an
error), one label set is one metric, counters only grow, histograms need sorted distinct buckets
and only observe, and a metric whose family object was deleted refuses every operation. A family
disappears from /metrics when the last object naming it is gone (the model was unloaded).
"""

from __future__ import annotations

import bisect
import itertools
import re
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_KIND_NAMES = {0: "counter", 1: "gauge", 2: "histogram"}


class MetricError(Exception):
    """Misuse of the metrics API (pb_utils raises it as TritonModelException)."""


@dataclass
class _Series:
    value: float = 0.0
    buckets: tuple[float, ...] = ()
    counts: list[int] = field(default_factory=list)  # per bucket (not cumulative), +Inf last
    total: float = 0.0
    observations: int = 0


@dataclass
class _Family:
    name: str
    description: str
    kind: int
    users: int = 0
    series: dict[tuple[tuple[str, str], ...], _Series] = field(default_factory=dict)


class MetricStore:
    """Every custom metric of this process, guarded by one lock (models call from many threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self.refusal = ""  # set where metrics cannot reach /metrics (an isolated model's child process)

    def acquire(self, name: str, description: str, kind: int) -> _Family:
        if self.refusal:
            raise MetricError(self.refusal)
        if not isinstance(name, str) or not _NAME.match(name):
            raise MetricError(f"MetricFamily: '{name}' is not a valid metric name")
        if kind not in _KIND_NAMES:
            raise MetricError(f"MetricFamily '{name}': unknown kind {kind!r} (COUNTER, GAUGE or HISTOGRAM)")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _Family(name, str(description), kind)
            elif family.kind != kind:
                raise MetricError(
                    f"MetricFamily '{name}' already exists as a {_KIND_NAMES[family.kind]}; "
                    f"it cannot also be a {_KIND_NAMES[kind]}"
                )
            family.users += 1
            return family

    def release(self, family: _Family) -> None:
        with self._lock:
            family.users -= 1
            if family.users <= 0 and self._families.get(family.name) is family:
                del self._families[family.name]

    def series(self, family: _Family, labels: dict[str, str], buckets: Sequence[float] | None) -> _Series:
        key = tuple(sorted(labels.items()))
        with self._lock:
            found = family.series.get(key)
            if found is None:
                found = family.series[key] = _Series()
                if family.kind == 2:
                    found.buckets = tuple(float(b) for b in buckets or ())
                    found.counts = [0] * (len(found.buckets) + 1)
            return found

    def update(self, series: _Series, kind: int, operation: str, value: float) -> float:
        with self._lock:
            if operation == "increment":
                series.value += value
            elif operation == "set":
                series.value = value
            elif operation == "observe":
                series.counts[bisect.bisect_left(series.buckets, value)] += 1
                series.total += value
                series.observations += 1
            return series.value

    def snapshot(self) -> list[tuple[_Family, list[tuple[dict[str, str], _Series]]]]:
        """A consistent copy of every family for one scrape."""
        with self._lock:
            return [
                (
                    family,
                    [
                        (dict(key), _Series(s.value, s.buckets, list(s.counts), s.total, s.observations))
                        for key, s in family.series.items()
                    ],
                )
                for family in self._families.values()
            ]


STORE = MetricStore()


class MetricFamily:
    """Triton's ``pb_utils.MetricFamily(name, description, kind)``."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        from .triton_python_backend_utils import TritonModelException

        try:
            self._family = STORE.acquire(name, description, kind)
        except MetricError as exc:
            raise TritonModelException(str(exc)) from None

    def Metric(self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None) -> Metric:  # noqa: N802 - Triton's name
        return Metric(self, labels, buckets)

    def __del__(self) -> None:
        family = getattr(self, "_family", None)
        if family is not None:
            STORE.release(family)


class Metric:
    """One metric (one label set) of a family; ``MetricFamily.Metric(labels, buckets)`` makes it."""

    def __init__(
        self, family: MetricFamily, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> None:
        labels = dict(labels or {})
        kind = family._family.kind
        name = family._family.name
        for key, value in labels.items():
            if not isinstance(key, str) or not _LABEL.match(key) or key.startswith("__"):
                _raise(f"Metric of '{name}': '{key}' is not a valid label name")
            if not isinstance(value, str):
                _raise(f"Metric of '{name}': label '{key}' must be a string, got {type(value).__name__}")
        if kind == MetricFamily.HISTOGRAM:
            if buckets is None:
                _raise(f"Metric of histogram '{name}': 'buckets' is required")
            values = [float(b) for b in buckets or ()]
            if any(b >= c for b, c in itertools.pairwise(values)):
                _raise(f"Metric of histogram '{name}': buckets {values} must be increasing and distinct")
        elif buckets is not None:
            _raise(f"Metric of '{name}': only a histogram takes 'buckets'")
        self._owner = weakref.ref(family)
        self._kind = kind
        self._name = name
        self._series = STORE.series(family._family, labels, buckets)

    def _live(self) -> None:
        if self._owner() is None:
            _raise("Invalid metric operation as the corresponding 'MetricFamily' has been deleted.")

    def increment(self, value: float) -> None:
        self._live()
        if self._kind == MetricFamily.HISTOGRAM:
            _raise(f"histogram '{self._name}' does not support increment(); use observe()")
        if self._kind == MetricFamily.COUNTER and value < 0:
            _raise(f"counter '{self._name}' can only increase: increment({value}) is negative")
        STORE.update(self._series, self._kind, "increment", float(value))

    def set(self, value: float) -> None:
        self._live()
        if self._kind != MetricFamily.GAUGE:
            _raise(f"{_KIND_NAMES[self._kind]} '{self._name}' does not support set(); only a gauge does")
        STORE.update(self._series, self._kind, "set", float(value))

    def observe(self, value: float) -> None:
        self._live()
        if self._kind != MetricFamily.HISTOGRAM:
            _raise(f"{_KIND_NAMES[self._kind]} '{self._name}' does not support observe(); only a histogram does")
        STORE.update(self._series, self._kind, "observe", float(value))

    def value(self) -> float:
        self._live()
        if self._kind == MetricFamily.HISTOGRAM:
            _raise(f"histogram '{self._name}' has no single value()")
        return self._series.value


def _raise(message: str) -> None:
    from .triton_python_backend_utils import TritonModelException

    raise TritonModelException(message)


def _bound(value: float) -> str:
    """A bucket bound as Triton writes it: ``1``, ``2.5``, ``+Inf``."""
    if value == float("inf"):
        return "+Inf"
    return str(int(value)) if value.is_integer() else repr(value)


def exposition() -> str:
    """Every custom metric in Prometheus' text format, exactly as Triton writes it (a counter keeps
    its name: prometheus_client's own exposition would call it NAME_total)."""
    lines: list[str] = []
    for family, series in STORE.snapshot():
        description = family.description.replace("\\", "\\\\").replace("\n", "\\n")
        lines += [f"# HELP {family.name} {description}", f"# TYPE {family.name} {_KIND_NAMES[family.kind]}"]
        for labels, values in series:
            if family.kind != MetricFamily.HISTOGRAM:
                lines.append(f"{family.name}{_labels(labels)} {_number(values.value)}")
                continue
            running = 0
            for bound, count in zip((*values.buckets, float("inf")), values.counts, strict=True):
                running += count
                lines.append(f"{family.name}_bucket{_labels({**labels, 'le': _bound(bound)})} {running}")
            lines.append(f"{family.name}_sum{_labels(labels)} {_number(values.total)}")
            lines.append(f"{family.name}_count{_labels(labels)} {values.observations}")
    return "\n".join(lines) + "\n" if lines else ""


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def metrics_app(registry: CollectorRegistry) -> Callable[..., Awaitable[None]]:
    """The /metrics ASGI app: the server's registry, then the Python models' custom metrics."""

    async def app(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return
        body = generate_latest(registry) + exposition().encode()
        headers = [(b"content-type", CONTENT_TYPE_LATEST.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app
