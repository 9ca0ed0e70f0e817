"""Results out: a table on the terminal, CSV, JSON, and a latency-vs-throughput PNG."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .extra import PERF_INSTALL_HINT
from .runner import StepResult

_COLUMNS = (
    ("value", "{:g}"),
    ("throughput", "{:.1f}"),
    ("p50_ms", "{:.2f}"),
    ("p90_ms", "{:.2f}"),
    ("p95_ms", "{:.2f}"),
    ("p99_ms", "{:.2f}"),
    ("avg_ms", "{:.2f}"),
    ("failed", "{:d}"),
    ("stable", "{}"),
    ("server_queue_us", "{:.0f}"),
    ("server_compute_us", "{:.0f}"),
    ("server_batch", "{:.2f}"),
    ("client_requests", "{:d}"),
    ("server_requests", "{:d}"),
    ("client_cpu", "{:.0%}"),
    ("client_cores", "{:.2f}"),
    ("client_limited", "{}"),
)


def row(step: StepResult) -> dict[str, Any]:
    """One flat row per step (the CSV and the table share it)."""
    server = step.server
    nan = float("nan")
    return {
        "mode": step.mode,
        "value": step.value,
        "throughput": step.client.throughput,
        "p50_ms": step.client.p50_us / 1e3,
        "p90_ms": step.client.p90_us / 1e3,
        "p95_ms": step.client.p95_us / 1e3,
        "p99_ms": step.client.p99_us / 1e3,
        "avg_ms": step.client.avg_us / 1e3,
        "failed": step.client_failures,
        "stable": step.stable,
        "server_queue_us": server.queue_us if server else nan,
        "server_compute_us": (server.compute_input_us + server.compute_infer_us + server.compute_output_us)
        if server
        else nan,
        "server_compute_infer_us": server.compute_infer_us if server else nan,
        "server_batch": server.avg_batch if server else nan,
        "client_requests": step.client_requests,
        "server_requests": server.requests if server else -1,
        "client_cpu": step.client_cpu,
        "client_cores": step.client_cores,
        "client_limited": step.client_limited,
        "delayed": step.delayed,
    }


def table(steps: Sequence[StepResult]) -> str:
    """A fixed-width table; the first column is named after the sweep (concurrency or rate)."""
    if not steps:
        return "(no steps measured)"
    headers = [steps[0].mode if name == "value" else name for name, _ in _COLUMNS]
    lines = []
    for step in steps:
        values = row(step)
        cells = []
        for name, fmt in _COLUMNS:
            value = values[name]
            cells.append("-" if isinstance(value, float) and math.isnan(value) else fmt.format(value))
        lines.append(cells)
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    out += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out)


def client_limit_note(steps: Sequence[StepResult]) -> str | None:
    """A line under the table naming the steps whose pace the tool itself set, or None."""
    limited = [f"{step.value:g}" for step in steps if step.client_limited]
    if not limited:
        return None
    return (
        f"note: the client was the limit at {steps[0].mode} {', '.join(limited)} (a worker process used "
        "more than 90% of a core): these figures understate the server; raise --processes or run the tool "
        "on another machine"
    )


def write_csv(path: Path, steps: Sequence[StepResult]) -> None:
    rows = [row(step) for step in steps]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["mode"])
        writer.writeheader()
        writer.writerows(rows)


def write_json(path: Path, steps: Sequence[StepResult], meta: Mapping[str, Any]) -> None:
    document = {"meta": dict(meta), "steps": [step.as_dict() for step in steps]}
    path.write_text(json.dumps(_finite(document), indent=2, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    """NaN (no request measured) becomes null: strict JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def write_plot(path: Path, steps: Sequence[StepResult], title: str) -> None:
    """Latency percentiles against throughput, one point per step (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError(f"--plot needs matplotlib: {PERF_INSTALL_HINT}") from None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    throughput = [s.client.throughput for s in steps]
    for key, label in (("p50_us", "p50"), ("p95_us", "p95"), ("p99_us", "p99")):
        axes.plot(throughput, [getattr(s.client, key) / 1e3 for s in steps], marker="o", label=label)
    for step, x in zip(steps, throughput, strict=True):
        axes.annotate(
            f"{step.value:g}", (x, step.client.p50_us / 1e3), textcoords="offset points", xytext=(4, -10), fontsize=8
        )
    axes.set_xlabel("throughput (infer/s)")
    axes.set_ylabel("latency (ms)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
