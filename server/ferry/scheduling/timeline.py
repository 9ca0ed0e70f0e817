"""When one request passed each stage, for tracing (Triton's QUEUE_START ... COMPUTE_END)."""

from __future__ import annotations

import time
from dataclasses import dataclass

#: Add to a ``time.perf_counter_ns()`` reading to get nanoseconds since the epoch.
EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


@dataclass
class Timeline:
    """``perf_counter_ns`` readings, filled in by the scheduler; zero means the stage never ran."""

    queue_start: int = 0
    compute_start: int = 0
    compute_input_end: int = 0
    compute_output_start: int = 0
    compute_end: int = 0
