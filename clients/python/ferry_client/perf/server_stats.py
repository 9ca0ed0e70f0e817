"""The server's own view of a step: deltas of the V2 statistics extension before and after it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

_PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


def totals(statistics: Mapping[str, Any], model: str, version: str = "") -> dict[str, int]:
    """Cumulative counters and nanoseconds of one model (all its versions unless one is named)."""
    result = dict.fromkeys(
        ("success", "success_ns", "fail", "inference_count", "execution_count", *(f"{p}_ns" for p in _PHASES)), 0
    )
    for entry in statistics.get("model_stats", []):
        if entry.get("name") != model or (version and str(entry.get("version")) != str(version)):
            continue
        stats = entry.get("inference_stats", {})
        result["success"] += int(stats.get("success", {}).get("count", 0))
        result["success_ns"] += int(stats.get("success", {}).get("ns", 0))
        result["fail"] += int(stats.get("fail", {}).get("count", 0))
        for phase in _PHASES:
            result[f"{phase}_ns"] += int(stats.get(phase, {}).get("ns", 0))
        result["inference_count"] += int(entry.get("inference_count", 0))
        result["execution_count"] += int(entry.get("execution_count", 0))
    return result


@dataclass(frozen=True)
class ServerBreakdown:
    """Per-request averages (microseconds) over a step, as the server measured them."""

    requests: int
    failures: int
    avg_request_us: float
    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float
    avg_batch: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def breakdown(before: Mapping[str, int], after: Mapping[str, int]) -> ServerBreakdown:
    delta = {key: after[key] - before[key] for key in after}
    requests = delta["success"]

    def per_request(key: str) -> float:
        return delta[key] / requests / 1e3 if requests else float("nan")

    executions = delta["execution_count"]
    return ServerBreakdown(
        requests=requests,
        failures=delta["fail"],
        avg_request_us=per_request("success_ns"),
        queue_us=per_request("queue_ns"),
        compute_input_us=per_request("compute_input_ns"),
        compute_infer_us=per_request("compute_infer_ns"),
        compute_output_us=per_request("compute_output_ns"),
        avg_batch=delta["inference_count"] / executions if executions else float("nan"),
    )
