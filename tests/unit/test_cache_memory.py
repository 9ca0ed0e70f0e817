"""The response cache's byte bound bounds its real memory (issue 24): measured as RSS, in-process.

Values are built as the data plane stores them (``({name: array}, batch_size)``, arrays owning their
data); RSS growth is compared with the cache's capacity. Before sizes counted Python objects, 100k
small entries counted as 12.8 MB held ~95 MB, and BYTES outputs of empty strings counted as 0.
"""

from __future__ import annotations

import gc
import hashlib

import numpy as np
import psutil

from ferry.caching import ResponseCache, entry_size

CAPACITY = 16 * 2**20
#: Allocator slack: an entry exists before it evicts older ones, and freed entries' memory is
#: reused by later ones but not always returned at once.
SLACK = 1.5


def _rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def _key(index: int) -> bytes:
    return hashlib.blake2b(index.to_bytes(8, "little"), digest_size=32).digest()


def test_many_small_entries_stay_within_the_capacity() -> None:
    cache = ResponseCache(CAPACITY)
    before = _rss()
    for index in range(100_000):
        value = ({"y": np.full((1, 16), index, np.float32)}, 1)
        cache.put(_key(index), value, entry_size(value))
    grown = _rss() - before
    assert cache.counters.evictions > 0  # the attack filled the cache
    assert grown < CAPACITY * SLACK, f"RSS +{grown / 2**20:.1f} MiB for a {CAPACITY / 2**20:.0f} MiB cache"


def test_bytes_outputs_count_their_objects() -> None:
    cache = ResponseCache(CAPACITY)
    before = _rss()
    for index in range(96):
        strings = np.array([b"%d" % (index * 2**16 + i) for i in range(2**16)], dtype=object).reshape(1, -1)
        value = ({"OUTPUT0": strings}, 1)
        cache.put(_key(index), value, entry_size(value))
        del strings, value
    grown = _rss() - before
    assert cache.utilization() <= 1.0
    assert grown < CAPACITY * SLACK, f"RSS +{grown / 2**20:.1f} MiB for a {CAPACITY / 2**20:.0f} MiB cache"


def test_entry_size_is_never_below_the_data() -> None:
    floats = ({"y": np.zeros((4, 1000), np.float32)}, 4)
    assert entry_size(floats) > 16_000
    strings = ({"s": np.array([b"", b"abc"], dtype=object)}, 1)
    assert entry_size(strings) >= 2 * 33 + 3
    records = [{"label": "cat", "score": 0.5, "index": 3}]
    assert entry_size(records) > 200
