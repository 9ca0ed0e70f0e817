"""The tuner's output: a table of every candidate measured, the verdict, and an optional plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .candidates import Candidate, client_changes, client_summary
from .objective import Objective, Point, Summary
from .search import Outcome


def histogram_text(batches: dict[int, int], top: int = 3) -> str:
    """The most frequent executed batch sizes with their share, e.g. ``8:71% 4:20% 1:9%``."""
    total = sum(batches.values())
    if not total:
        return "-"
    common = sorted(batches.items(), key=lambda item: (-item[1], item[0]))[:top]
    return " ".join(f"{size}:{count / total:.0%}" for size, count in common)


def _number(value: float, fmt: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def _spread(values: Sequence[float]) -> float:
    return (max(values) - min(values)) / 2 if len(values) > 1 else 0.0


def _row(
    index: int, mark: str, candidate: Candidate, point: Point, throughputs: list[float], gpu: bool, clients: str
) -> list[str]:
    cells = [
        f"{index}{mark}",
        candidate.label(),
        clients,
        f"{point.load:g}",
        f"{point.throughput:.1f}" + (f" ±{_spread(throughputs):.1f}" if len(throughputs) > 1 else ""),
        *(_number(point.latency_ms[q], "{:.2f}") for q in (50, 95, 99)),
        _number(point.queue_us, "{:.0f}"),
        _number(point.compute_us, "{:.0f}"),
        histogram_text(point.batches),
        _number(point.cpu_cores, "{:.2f}"),
        str(len(throughputs)),
    ]
    if gpu:
        use = point.gpu
        cells += (
            [
                f"{use.utilization:.0%}",
                f"{use.memory_bytes / 2**20:.0f}",
                _number(point.throughput / use.watts, "{:.1f}"),
            ]
            if use and use.watts
            else ["-", "-", "-"]
        )
    return cells


def table(outcome: Outcome, mode: str) -> str:
    """One row per candidate and load level; ``*`` marks the winner, ``=`` the current config; "for
    clients" says what a candidate changes for them (see ``client_changes``)."""
    gpu = any(p.gpu for s in outcome.summaries.values() for p in s.points)
    headers = [
        "#",
        "candidate",
        "for clients",
        "conc." if mode == "concurrency" else "rate",
        "infer/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "queue us",
        "compute us",
        "batch sizes",
        "CPU cores",
        "rounds",
    ]
    if gpu:
        headers += ["GPU util", "GPU MiB", "infer/s/W"]
    rows = []
    for index, (candidate, summary) in enumerate(outcome.summaries.items(), 1):
        mark = "*" if candidate == outcome.winner else ("=" if candidate.current else "")
        for point in summary.points:
            throughputs = [p.throughput for s in outcome.samples[candidate] for p in s if p.load == point.load]
            clients = client_summary(outcome.current, candidate)
            rows.append(_row(index, mark, candidate, point, throughputs, gpu, clients))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "  ".join(
            h.ljust(w) if i in (1, 2) else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    ]
    for r in rows:
        lines.append(
            "  ".join(c.ljust(w) if i in (1, 2) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
    return "\n".join(lines)


def verdict(outcome: Outcome, objective: Objective, mode: str) -> list[str]:
    """What was found, in words: the winner and by how much, or that the current config is as good."""
    current = outcome.summaries[outcome.current]
    lines = [
        f"{len(outcome.summaries)} candidates, {outcome.measurements} measurements in {outcome.seconds:.0f} s "
        f"({outcome.final_rounds} interleaved final rounds); objective: {objective.describe()}"
    ]
    if outcome.winner is None:
        best = max(
            (c for c in outcome.confirmed if not c.current and outcome.summaries[c].score is not None),
            key=lambda c: outcome.summaries[c].score or 0.0,
            default=None,
        )
        if current.score is None and best is None:
            lines.append("no candidate met the constraint, the current config included")
        else:
            lines.append(
                "the current config is as good as anything measured: no candidate beat it by more than the "
                "spread of the rounds" + (f" (best: {best.label()})" if best else "")
            )
        return lines
    won = outcome.summaries[outcome.winner]
    assert won.score is not None

    def where(summary: Summary) -> str:
        point = objective.best(summary.points)
        return f" at {'concurrency' if mode == 'concurrency' else 'rate'} {point.load:g}" if point else ""

    if current.score is None:
        against = "the current config does not meet the constraint"
    else:
        against = (
            f"current config {objective.unit(current.score)} {objective.plus_minus(current.spread)}{where(current)}; "
            f"winner {objective.unit(won.score)} {objective.plus_minus(won.spread)}{where(won)}"
        )
        if not objective.minimise_latency and current.score > 0:
            against += f" ({won.score / current.score:.2f}x)"
    lines.append(f"recommended: {outcome.winner.label()} ({against})")
    changes = client_changes(outcome.current, outcome.winner)
    lines += [f"  for clients: {change}" for change in changes] or ["  for clients: nothing changes"]
    return lines


def write_plot(path: Path, outcome: Outcome, objective: Objective, title: str) -> None:
    """Throughput against the objective's latency percentile, one marker per candidate and load level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    q = objective.percentile
    for candidate, summary in outcome.summaries.items():
        xs = [p.throughput for p in summary.points]
        ys = [p.latency_ms[q] for p in summary.points]
        style = {"marker": "o", "linestyle": "-", "alpha": 0.5}
        if candidate == outcome.winner:
            style = {"marker": "*", "linestyle": "-", "markersize": 12, "alpha": 1.0}
        elif candidate.current:
            style = {"marker": "s", "linestyle": "--", "alpha": 1.0}
        axes.plot(xs, ys, label=candidate.label(), **style)  # type: ignore[arg-type]
    if objective.latency_budget_ms:
        axes.axhline(objective.latency_budget_ms, color="red", linewidth=1, label=f"p{q} budget")
    axes.set_xlabel("inferences/s")
    axes.set_ylabel(f"p{q} latency (ms)")
    axes.set_title(title)
    axes.legend(fontsize=6, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
