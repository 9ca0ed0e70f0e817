"""The response cache's LRU bound in bytes, and which request fields its keys depend on."""

from __future__ import annotations

import numpy as np
import pytest

from ferry.caching import ResponseCache, images_key, request_key
from ferry.types import InferenceRequest, RequestedOutput


def test_evicts_least_recently_used_until_the_new_entry_fits() -> None:
    cache = ResponseCache(100)
    for key in (b"a", b"b", b"c"):
        assert cache.put(key, key.decode(), 30)
    assert cache.get(b"a") == "a"  # now b is the oldest
    assert cache.put(b"d", "d", 30)
    assert cache.get(b"b") is None
    assert [cache.get(k) for k in (b"a", b"c", b"d")] == ["a", "c", "d"]
    assert (cache.used_bytes, len(cache), cache.counters.evictions) == (90, 3, 1)
    assert cache.put(b"e", "e", 70)  # evicts a and c (the two least recently used), keeps d
    assert [cache.get(k) for k in (b"a", b"c", b"d", b"e")] == [None, None, "d", "e"]
    assert cache.used_bytes == 100 and cache.utilization() == 1.0


def test_entry_larger_than_the_cache_is_not_stored_and_evicts_nothing() -> None:
    cache = ResponseCache(64)
    cache.put(b"small", 1, 10)
    assert not cache.put(b"big", 2, 65)
    assert cache.get(b"big") is None and cache.get(b"small") == 1
    assert cache.counters.evictions == 0


def test_replacing_a_key_counts_its_size_once() -> None:
    cache = ResponseCache(64)
    cache.put(b"k", 1, 40)
    cache.put(b"k", 2, 50)
    assert (cache.get(b"k"), cache.used_bytes, len(cache)) == (2, 50, 1)
    counters = cache.counters
    assert (counters.lookups, counters.hits, counters.misses) == (1, 1, 0)


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive size"):
        ResponseCache(0)


def _request(**changes) -> InferenceRequest:
    fields = {
        "model_name": "m",
        "inputs": {"x": np.arange(4, dtype=np.float32).reshape(1, 4)},
        "input_datatypes": {"x": "FP32"},
        "outputs": [RequestedOutput("y")],
        "parameters": {},
    }
    fields.update(changes)
    return InferenceRequest(**fields)


def test_request_key_covers_what_changes_the_answer() -> None:
    base = request_key("m/1", _request())
    assert request_key("m/1", _request()) == base
    different = [
        request_key("m/2", _request()),
        request_key("other/1", _request()),
        request_key("m/1", _request(inputs={"x": np.arange(1, 5, dtype=np.float32).reshape(1, 4)})),
        request_key("m/1", _request(inputs={"x": np.arange(4, dtype=np.float32).reshape(2, 2)})),
        request_key("m/1", _request(input_datatypes={"x": "INT32"}, inputs={"x": np.arange(4, dtype=np.int32)})),
        request_key("m/1", _request(outputs=[RequestedOutput("y", classification=3)])),
        request_key("m/1", _request(outputs=None)),
        request_key("m/1", _request(parameters={"custom": 1})),
    ]
    assert len({base, *different}) == len(different) + 1
    delivery = {"priority": 2, "timeout": 1000, "binary_data_output": True}
    assert request_key("m/1", _request(parameters=delivery, outputs=[RequestedOutput("y", binary=True)])) == base


def test_images_key_uses_encoded_bytes_and_options() -> None:
    base = images_key("m/1", "classify", [b"png-1", b"png-2"], {"top_k": 3})
    assert images_key("m/1", "classify", [b"png-1", b"png-2"], {"top_k": 3}) == base
    assert images_key("m/1", "classify", [b"png-1png-2"], {"top_k": 3}) != base  # no joining collisions
    assert images_key("m/1", "classify", [b"png-1", b"png-2"], {"top_k": 4}) != base
    assert images_key("m/1", "detect", [b"png-1", b"png-2"], {"top_k": 3}) != base
