"""The model process's Prometheus histograms: the exposition prometheus_client gives, at a fraction
of its cost per observation, and a batch's requests observed each with its own value."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ferry.histograms import HistogramFamily
from ferry.metrics import BATCH_BUCKETS, LATENCY_BUCKETS_US, Metrics
from ferry.statistics import ModelStats

#: Values on, between, under and past the bounds.
VALUES = [0.0, 0.5, 50.0, 50.000001, 99.9, 100.0, 2_500.0, 7_777.7, 10_000_000.0, 10_000_000.5, 3e9]


def exposition(family_type: type, buckets: tuple[float, ...], values: list[float], batch: bool) -> bytes:
    registry = CollectorRegistry()
    if family_type is Histogram:
        family = Histogram("h_us", "help text", ("model", "version"), buckets=buckets, registry=registry)
    else:
        family = HistogramFamily("h_us", "help text", ("model", "version"), buckets)
        registry.register(family)
    for labels in (("a", "1"), ("b", "2")):
        child = family.labels(*labels)
        if batch and hasattr(child, "observe_all"):
            child.observe_all(values)
        else:
            for value in values:
                child.observe(value)
    family.remove("b", "2")
    return generate_latest(registry)


@pytest.mark.parametrize(
    "buckets", [tuple(float(b) for b in LATENCY_BUCKETS_US), tuple(float(b) for b in BATCH_BUCKETS)]
)
@pytest.mark.parametrize("batch", [False, True])
def test_the_exposition_is_prometheus_clients(buckets: tuple[float, ...], batch: bool) -> None:
    from prometheus_client import disable_created_metrics

    disable_created_metrics()  # as the server's registry does
    ours = exposition(HistogramFamily, buckets, VALUES, batch)
    assert ours == exposition(Histogram, buckets, VALUES, batch)
    assert b'h_us_count{model="a",version="1"} 11.0' in ours and b'model="b"' not in ours


def test_a_batchs_requests_are_each_observed_with_their_own_value() -> None:
    metrics = Metrics(lambda: [])
    stats = ModelStats("m", "1")
    stats.histograms = metrics.histograms_for("m", "1")
    stats.record_successes([(40_000, 1_000), (120_000, 60_000), (3_000_000, 2_000_000)])
    stats.record_successes([(2_600_000, 0)])
    text = generate_latest(metrics.registry).decode()
    request = "nv_inference_request_duration_histogram_us"
    assert f'{request}_bucket{{le="50.0",model="m",version="1"}} 1.0' in text
    assert f'{request}_bucket{{le="250.0",model="m",version="1"}} 2.0' in text
    assert f'{request}_bucket{{le="2500.0",model="m",version="1"}} 2.0' in text
    assert f'{request}_bucket{{le="5000.0",model="m",version="1"}} 4.0' in text
    assert f'{request}_count{{model="m",version="1"}} 4.0' in text
    assert f'{request}_sum{{model="m",version="1"}} 5760.0' in text
    assert 'nv_inference_queue_duration_histogram_us_sum{model="m",version="1"} 2061.0' in text
    assert stats.infer["success"].count == 4 and stats.infer["success"].ns == 5_760_000
    assert stats.infer["queue"].count == 4 and stats.infer["queue"].ns == 2_061_000
