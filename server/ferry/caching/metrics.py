"""Triton's nv_cache_* metrics: per-model hit/miss counts and durations, and the cache's own gauges."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..metrics import CounterMetricFamily
from ..repository.model import ModelVersion
from .response_cache import ResponseCache

_LABELS = ("model", "version")


class CacheCollector(Collector):
    """Read at scrape time from each model's statistics and from the cache, like the other collectors."""

    def __init__(self, cache: ResponseCache, models: Callable[[], Iterable[ModelVersion]]) -> None:
        self._cache = cache
        self._models = models

    def collect(self) -> Iterable[Metric]:
        hits = CounterMetricFamily("nv_cache_num_hits_per_model", "Response cache hits", _LABELS)
        misses = CounterMetricFamily("nv_cache_num_misses_per_model", "Response cache misses", _LABELS)
        hit_us = CounterMetricFamily(
            "nv_cache_hit_duration_per_model", "Cumulative time of cache hit lookups (us)", _LABELS
        )
        miss_us = CounterMetricFamily(
            "nv_cache_miss_duration_per_model", "Cumulative time of cache misses: lookup and insertion (us)", _LABELS
        )
        for model in self._models():
            if not model.config.response_cache.enable:
                continue
            labels = [model.name, str(model.version)]
            cache = model.stats.snapshot()["cache"]
            hits.add_metric(labels, cache["cache_hit"]["count"])
            misses.add_metric(labels, cache["cache_miss"]["count"])
            hit_us.add_metric(labels, cache["cache_hit"]["ns"] / 1000)
            miss_us.add_metric(labels, cache["cache_miss"]["ns"] / 1000)
        yield from (hits, misses, hit_us, miss_us)
        counters = self._cache.counters
        yield GaugeMetricFamily("nv_cache_num_entries", "Responses held in the cache", value=len(self._cache))
        yield GaugeMetricFamily(
            "nv_cache_util", "Fraction of the cache size in use (0..1)", value=self._cache.utilization()
        )
        for name, text, value in (
            ("nv_cache_num_lookups", "Cache lookups", counters.lookups),
            ("nv_cache_num_hits", "Cache hits", counters.hits),
            ("nv_cache_num_misses", "Cache misses", counters.misses),
            ("nv_cache_num_evictions", "Entries evicted to make room", counters.evictions),
        ):
            family = CounterMetricFamily(name, text, ())
            family.add_metric((), value)
            yield family
