"""The metrics registry as one JSON document, grouped the way the dashboard draws it.

The dashboard must show the same numbers as ``/metrics`` and the statistics API, so it reads the
server's Prometheus registry (the per-model counters from ModelStats, the latency and batch-size
histograms, the host and GPU collectors) instead of computing anything itself. Values stay
cumulative; the page derives rates and percentiles from two successive snapshots, as
``rate()`` and ``histogram_quantile()`` would.
"""

from __future__ import annotations

import math
import time
from typing import Any

from prometheus_client.registry import Collector

_MODEL_LABELS = ("model", "version")


def _histogram(entry: dict[str, Any], family: str) -> dict[str, Any]:
    return entry["histograms"].setdefault(family, {"le": [], "buckets": [], "sum": 0.0, "count": 0.0})


def _add_histogram_sample(histogram: dict[str, Any], sample_name: str, labels: dict[str, str], value: float) -> None:
    """Finite buckets keep their cumulative counts; the +Inf bucket is the ``count``."""
    if sample_name.endswith("_bucket"):
        bound = float(labels["le"])
        if math.isfinite(bound):
            histogram["le"].append(bound)
            histogram["buckets"].append(value)
    elif sample_name.endswith("_sum"):
        histogram["sum"] = value
    elif sample_name.endswith("_count"):
        histogram["count"] = value


def metrics_snapshot(registry: Collector) -> dict[str, Any]:
    """Every sample of ``registry``: per model version, per GPU, and host-wide.

    Model samples carry ``model``/``version`` labels; a remaining label (the failure ``reason``)
    becomes a nested mapping. GPU samples carry a ``gpu`` label. Everything else is host-wide
    (nested the same way when it has labels).
    Histogram children outlive an unloaded version, so a version without counters (which only
    loaded versions report) is left out.
    """
    models: dict[tuple[str, str], dict[str, Any]] = {}
    gpus: dict[str, dict[str, float]] = {}
    host: dict[str, Any] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            if all(key in labels for key in _MODEL_LABELS):
                key = (labels.pop("model"), labels.pop("version"))
                entry = models.setdefault(key, {"name": key[0], "version": key[1], "counters": {}, "histograms": {}})
                if family.type == "histogram":
                    _add_histogram_sample(_histogram(entry, family.name), sample.name, labels, sample.value)
                elif labels:
                    entry["counters"].setdefault(sample.name, {})["/".join(labels.values())] = sample.value
                else:
                    entry["counters"][sample.name] = sample.value
            elif "gpu" in labels:
                gpus.setdefault(labels.pop("gpu"), {})[sample.name] = sample.value
            elif labels:  # a host-wide series with labels of its own: one value per label set
                host.setdefault(sample.name, {})["/".join(labels.values())] = sample.value
            else:
                host[sample.name] = sample.value
    return {
        "time": time.time(),
        "models": [models[key] for key in sorted(models) if models[key]["counters"]],
        "host": host,
        "gpus": [{"gpu": index, **values} for index, values in sorted(gpus.items())],
    }
