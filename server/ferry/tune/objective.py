"""What a measurement is and how candidates are judged: the objective, medians and their spread.

Pure functions over measured numbers, so the rules that pick a winner are unit-tested with
made-up measurements.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class GpuUse:
    """NVML readings averaged over a measurement."""

    utilization: float  # 0..1
    memory_bytes: int
    watts: float


@dataclass(frozen=True)
class Point:
    """One load level (concurrency or request rate) measured once."""

    load: float
    throughput: float  # inferences per second (batch items)
    latency_ms: dict[int, float]  # percentile -> milliseconds
    failures: int = 0
    queue_us: float = float("nan")
    compute_us: float = float("nan")
    batches: dict[int, int] = field(default_factory=dict)  # executed batch size -> executions
    cpu_cores: float = float("nan")  # server CPU use in cores
    gpu: GpuUse | None = None


Sample = tuple[Point, ...]  # one round of one candidate: a point per load level


@dataclass(frozen=True)
class Objective:
    """Maximum throughput within a latency budget, or minimum latency at a required throughput."""

    percentile: int = 99
    latency_budget_ms: float | None = None
    min_throughput: float | None = None

    @property
    def minimise_latency(self) -> bool:
        return self.min_throughput is not None

    def describe(self) -> str:
        if self.minimise_latency:
            return f"lowest p{self.percentile} latency at >= {self.min_throughput:g} infer/s"
        budget = f" with p{self.percentile} <= {self.latency_budget_ms:g} ms" if self.latency_budget_ms else ""
        return f"highest throughput{budget}"

    def admissible(self, point: Point) -> bool:
        if point.failures:
            return False
        if self.minimise_latency:
            return point.throughput >= (self.min_throughput or 0.0)
        return self.latency_budget_ms is None or point.latency_ms[self.percentile] <= self.latency_budget_ms

    def best(self, points: Sequence[Point]) -> Point | None:
        """The load level that scores: the most throughput (or the least latency) within the constraint."""
        good = [p for p in points if self.admissible(p)]
        if not good:
            return None
        if self.minimise_latency:
            return min(good, key=lambda p: p.latency_ms[self.percentile])
        return max(good, key=lambda p: p.throughput)

    def score(self, points: Sequence[Point]) -> float | None:
        """Higher is better; None when no load level meets the constraint."""
        point = self.best(points)
        if point is None:
            return None
        return -point.latency_ms[self.percentile] if self.minimise_latency else point.throughput

    def unit(self, score: float) -> str:
        return f"p{self.percentile} {-score:.2f} ms" if self.minimise_latency else f"{score:.1f} infer/s"

    def plus_minus(self, spread: float) -> str:
        """A spread as the table writes it (throughput: one decimal, as its infer/s column)."""
        return f"±{abs(spread):.2f} ms" if self.minimise_latency else f"±{abs(spread):.1f}"


def parse_latency_budget(text: str) -> tuple[int, float]:
    """``p99=50ms`` (or p95, p50; ms, us or s) as (percentile, milliseconds)."""
    match = re.fullmatch(r"\s*p(50|95|99)\s*=\s*([0-9]*\.?[0-9]+)\s*(ms|us|s)?\s*", text)
    if not match:
        raise ValueError(f"--latency-budget '{text}': expected p99=50ms (percentile p50, p95 or p99)")
    value = float(match.group(2)) * {"ms": 1.0, "us": 1e-3, "s": 1e3, None: 1.0}[match.group(3)]
    if value <= 0:
        raise ValueError(f"--latency-budget '{text}': the budget must be > 0")
    return int(match.group(1)), value


def median_point(points: Sequence[Point]) -> Point:
    """The per-field median of one load level over rounds (histograms and failures summed)."""
    batches: dict[int, int] = {}
    for point in points:
        for size, count in point.batches.items():
            batches[size] = batches.get(size, 0) + count
    gpus = [p.gpu for p in points if p.gpu is not None]
    return Point(
        load=points[0].load,
        throughput=statistics.median(p.throughput for p in points),
        latency_ms={q: statistics.median(p.latency_ms[q] for p in points) for q in points[0].latency_ms},
        failures=sum(p.failures for p in points),
        queue_us=statistics.median(p.queue_us for p in points),
        compute_us=statistics.median(p.compute_us for p in points),
        batches=batches,
        cpu_cores=statistics.median(p.cpu_cores for p in points),
        gpu=GpuUse(
            statistics.median(g.utilization for g in gpus),
            int(statistics.median(g.memory_bytes for g in gpus)),
            statistics.median(g.watts for g in gpus),
        )
        if gpus
        else None,
    )


@dataclass(frozen=True)
class Summary:
    """A candidate over all its rounds: median points, their score and the rounds' spread."""

    points: tuple[Point, ...]
    score: float | None
    spread: float  # half the range of the rounds' values at the level that scores (0 with one round)

    def beats(self, other: Summary) -> bool:
        """Better than ``other`` by more than the two spreads together: not just noise."""
        if self.score is None:
            return False
        if other.score is None:
            return True
        return self.score - other.score > self.spread + other.spread

    def ties(self, other: Summary) -> bool:
        """Neither beats the other."""
        return not self.beats(other) and not other.beats(self)


def summarise(samples: Sequence[Sample], objective: Objective) -> Summary:
    loads = sorted({p.load for sample in samples for p in sample})
    medians = tuple(median_point([p for sample in samples for p in sample if p.load == load]) for load in loads)
    # the spread of the level the median scores at, as the table shows it for that level (each
    # round's own best level may differ, and would give another, smaller spread)
    scoring = objective.best(medians)
    at_level = [] if scoring is None else [p for sample in samples for p in sample if p.load == scoring.load]
    values = [s for s in (objective.score([p]) for p in at_level) if s is not None]
    spread = (max(values) - min(values)) / 2 if len(values) > 1 else 0.0
    return Summary(medians, objective.score(medians), spread)
