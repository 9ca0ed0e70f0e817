"""How many cores this process may really use: CPU affinity, capped by a cgroup v2 CPU quota.

Why: in a container with ``resources.limits.cpu: 2`` on a 64-core node, ``os.cpu_count()`` says 64,
and sizing process counts from it would start far more workers than the quota can run.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return max(1, cores)
    if quota == "max":
        return max(1, cores)
    return max(1, min(cores, math.ceil(int(quota) / int(period))))
