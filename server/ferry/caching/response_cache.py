"""An LRU of responses bounded by bytes, shared by every model whose config enables ``response_cache``.

Entries are keyed by a digest of everything that decides the answer, the loaded model's identity
included (see ``keys.py``), so the cache holds only the values and their sizes. Sizes are the memory
an entry keeps alive, Python objects and the entry's own bookkeeping included (``sizes.py``), so
the capacity bounds RSS. An entry larger than the whole cache is not stored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class CacheCounters:
    """Server-wide counts, for the nv_cache_* metrics."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class ResponseCache:
    """Least-recently-used values, evicted oldest first once their sizes exceed ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes <= 0:
            raise ValueError("the response cache needs a positive size in bytes")
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self.counters = CacheCounters()
        self._entries: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> Any | None:
        """The value stored under ``key`` (now the most recently used), or None."""
        with self._lock:
            self.counters.lookups += 1
            entry = self._entries.get(key)
            if entry is None:
                self.counters.misses += 1
                return None
            self._entries.move_to_end(key)
            self.counters.hits += 1
            return entry[0]

    def put(self, key: bytes, value: Any, size: int) -> bool:
        """Store ``value`` of ``size`` bytes, evicting the least recently used; False if it cannot fit."""
        if size > self.capacity_bytes:
            return False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used_bytes -= old[1]
            while self._entries and self.used_bytes + size > self.capacity_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self.used_bytes -= evicted
                self.counters.evictions += 1
            self._entries[key] = (value, size)
            self.used_bytes += size
            return True

    def utilization(self) -> float:
        return self.used_bytes / self.capacity_bytes
