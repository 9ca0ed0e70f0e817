"""``pb_utils.MetricFamily`` / ``Metric`` follow Triton's semantics (the cases of its python_backend
custom-metrics QA model, re-created), read back through the collector the server registers."""

from __future__ import annotations

import gc

import pytest

from ferry.backends.python_backend import triton_python_backend_utils as pb_utils
from ferry.backends.python_backend.custom_metrics import exposition


def _scrape() -> str:
    return exposition()


def test_counter_only_grows_and_cannot_be_set_or_observed() -> None:
    family = pb_utils.MetricFamily("unit_counter", "a counter", pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"a": "1", "b": "2"})
    assert metric.value() == 0.0
    metric.increment(2023.0)
    assert metric.value() == 2023.0
    for call, arg in ((metric.increment, -23.5), (metric.set, 9.0), (metric.observe, 0.05)):
        with pytest.raises(pb_utils.TritonModelException):
            call(arg)
    text = _scrape()
    assert '# TYPE unit_counter counter\nunit_counter{a="1",b="2"} 2023\n' in text  # Triton's layout


def test_gauge_goes_both_ways_and_is_set() -> None:
    family = pb_utils.MetricFamily("unit_gauge", "a gauge", pb_utils.MetricFamily.GAUGE)
    metric = family.Metric(labels={"k": "v"})
    metric.increment(10)
    metric.increment(-2.5)
    assert metric.value() == 7.5
    metric.set(999.9)
    assert metric.value() == 999.9
    with pytest.raises(pb_utils.TritonModelException):
        metric.observe(1.0)


def test_histogram_buckets_are_required_sorted_and_distinct() -> None:
    family = pb_utils.MetricFamily("unit_histogram", "a histogram", pb_utils.MetricFamily.HISTOGRAM)
    for buckets in (None, [2.5, 0.1, 1.0], [1, 1, 2]):
        with pytest.raises(pb_utils.TritonModelException):
            family.Metric(labels={}, buckets=buckets)
    family.Metric(labels={"empty": "yes"}, buckets=[])  # allowed: only +Inf
    metric = family.Metric(labels={"x": "y"}, buckets=[0.1, 1.0, 2.5, 5.0, 10.0])
    for call in (metric.value, lambda: metric.increment(1), lambda: metric.set(1)):
        with pytest.raises(pb_utils.TritonModelException):
            call()
    for value in (0.05, 1.5, 6.0):
        metric.observe(value)
    text = _scrape()
    for bound, count in (("0.1", 1), ("1", 1), ("2.5", 2), ("5", 2), ("10", 3), ("+Inf", 3)):
        assert f'unit_histogram_bucket{{x="y",le="{bound}"}} {count}\n' in text
    assert 'unit_histogram_count{x="y"} 3\n' in text and 'unit_histogram_sum{x="y"} 7.55\n' in text


def test_same_name_is_one_family_and_another_kind_is_refused() -> None:
    first = pb_utils.MetricFamily("unit_dup", "first description", pb_utils.MetricFamily.COUNTER)
    second = pb_utils.MetricFamily("unit_dup", "second description", pb_utils.MetricFamily.COUNTER)
    with pytest.raises(pb_utils.TritonModelException, match="already exists as a counter"):
        pb_utils.MetricFamily("unit_dup", "x", pb_utils.MetricFamily.GAUGE)
    one, same = first.Metric(labels={"k": "v"}), second.Metric(labels={"k": "v"})
    one.increment(7.5)
    assert same.value() == 7.5  # one label set is one metric
    del first
    gc.collect()
    text = _scrape()
    assert "unit_dup first description" in text and "second description" not in text
    del second, one, same
    gc.collect()
    assert "unit_dup" not in _scrape()  # the last family object is gone: so is the family


def test_a_metric_of_a_deleted_family_refuses_every_operation() -> None:
    family = pb_utils.MetricFamily("unit_lifetime", "d", pb_utils.MetricFamily.GAUGE)
    metric = family.Metric(labels={"k": "v"})
    del family
    gc.collect()
    for call in (metric.value, lambda: metric.set(1), lambda: metric.increment(1)):
        with pytest.raises(pb_utils.TritonModelException, match="'MetricFamily' has been deleted"):
            call()


def test_bad_names_and_labels_are_refused() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="not a valid metric name"):
        pb_utils.MetricFamily("1bad name", "d", pb_utils.MetricFamily.COUNTER)
    family = pb_utils.MetricFamily("unit_labels", "d", pb_utils.MetricFamily.COUNTER)
    for labels in ({"bad-key": "v"}, {"__reserved": "v"}, {"k": 3}):
        with pytest.raises(pb_utils.TritonModelException):
            family.Metric(labels=labels)
