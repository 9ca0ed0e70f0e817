"""How many cores this process may really use: CPU affinity, capped by a cgroup CPU quota.

Why: in a container with ``resources.limits.cpu: 2`` on a 64-core node, ``os.cpu_count()`` says 64,
and sizing process counts or engine thread pools from it would start far more threads than the
quota can run (they then queue for the CPU and every request gets slower).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

#: cgroup v2: "QUOTA PERIOD" or "max PERIOD".
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
#: cgroup v1 (hybrid hosts): cpu.cfs_quota_us (-1 = none) and cpu.cfs_period_us.
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")


def usable_cores(cpu_max: Path = CGROUP_CPU_MAX, v1_cpu: Path = CGROUP_V1_CPU) -> int:
    """Cores in this process's affinity, capped by the cgroup quota rounded up (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota(cpu_max, v1_cpu)
    return max(1, cores if quota is None else min(cores, math.ceil(quota)))


def cpu_quota(cpu_max: Path = CGROUP_CPU_MAX, v1_cpu: Path = CGROUP_V1_CPU) -> float | None:
    """The cgroup CPU quota in cores, or None when there is none (or none can be read)."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        v1_quota = int((v1_cpu / "cpu.cfs_quota_us").read_text())
        v1_period = int((v1_cpu / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if v1_quota <= 0 or v1_period <= 0 else v1_quota / v1_period


def engine_threads(cpu_instances: int) -> int:
    """Intra-op threads for each of ``cpu_instances`` CPU instances: the usable cores split evenly."""
    return max(1, usable_cores() // max(1, cpu_instances))
