"""Measurement windows: throughput, latency percentiles and the stability rule.

Pure functions over arrays of completion times and latencies, so the rules the perf tool
reports by (which windows count, when a step is stable) are unit-tested without a server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class WindowStats:
    """What one measurement window (or several merged) saw on the client side."""

    seconds: float
    completed: int
    failed: int
    throughput: float  # successful requests per second
    avg_us: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def window_stats(latencies_us: np.ndarray, failed: int, seconds: float) -> WindowStats:
    """Throughput and latency percentiles of the successful requests completed in a window."""
    if seconds <= 0:
        raise ValueError("a window must last longer than 0 s")
    count = int(latencies_us.size)
    if count:
        p50, p90, p95, p99 = (float(v) for v in np.percentile(latencies_us, PERCENTILES))
        avg = float(latencies_us.mean())
    else:
        p50 = p90 = p95 = p99 = avg = float("nan")
    return WindowStats(seconds, count, failed, count / seconds, avg, p50, p90, p95, p99)


def is_stable(windows: Sequence[WindowStats], tolerance: float, count: int = 3) -> bool:
    """True when the last ``count`` windows agree within ``tolerance`` (e.g. 0.10) of their mean.

    Like perf_analyzer, both throughput and a latency (p50) must agree; a window with no
    completed request is never stable.
    """
    if len(windows) < count:
        return False
    last = windows[-count:]
    for values in ([w.throughput for w in last], [w.p50_us for w in last]):
        array = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(array)) or array.mean() <= 0:
            return False
        if np.max(np.abs(array - array.mean())) > tolerance * array.mean():
            return False
    return True


def split_windows(ends: np.ndarray, start: float, window_s: float) -> np.ndarray:
    """Index of the window each completion time falls in (-1 before ``start``)."""
    index = np.floor((ends - start) / window_s).astype(np.int64)
    index[ends < start] = -1
    return index
