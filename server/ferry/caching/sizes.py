"""What a cached value really costs in memory, so the cache's byte bound is a bound on RSS.

Counting tensor bytes alone undercounts twice: a BYTES element is a Python object (~33 bytes of
header plus its text) behind an 8-byte pointer, so a million empty strings hold ~41 MB while their
lengths sum to 0; and a small entry's Python objects (its key, the LRU's slot, the dict of outputs,
each array's header) outweigh its few bytes of data several times over.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

#: The LRU's own cost per entry beyond the value: the 32-byte key as a bytes object (65), the
#: ordered dict's slot and link (~100), the (value, size) pair (56) and its size int (28), rounded up.
ENTRY_OVERHEAD = 256
#: A bytes object's header (CPython: ``sys.getsizeof(b"")``); a str's is larger.
_BYTES_HEADER = sys.getsizeof(b"")
_STR_HEADER = sys.getsizeof("")
_ALIGNMENT = 16


def entry_size(value: Any) -> int:
    """Bytes an entry holding ``value`` keeps alive: the value's objects plus the entry's own."""
    return ENTRY_OVERHEAD + value_size(value)


def value_size(value: Any) -> int:
    """Bytes held by ``value`` and what it references: arrays (their data, and for object arrays
    every element), dicts, lists, tuples, text and numbers. Shared objects count at every use,
    which errs on the safe side."""
    if isinstance(value, np.ndarray):
        return _array_size(value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(value_size(k) + value_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sys.getsizeof(value) + sum(value_size(item) for item in value)
    return sys.getsizeof(value)


def _array_size(array: np.ndarray) -> int:
    # header, shape and strides; the data buffer counted once even for a view (the cache owns copies)
    size = sys.getsizeof(array) - (array.nbytes if array.base is None else 0) + array.nbytes
    if array.dtype != object or array.size == 0:
        return size
    flat = array.reshape(-1)
    first = flat[0]
    if isinstance(first, bytes | bytearray | str):
        lengths = np.fromiter(map(len, flat), np.int64, count=flat.size)
        if isinstance(first, str):
            lengths = lengths * 4 + (_STR_HEADER - _BYTES_HEADER)  # up to 4 bytes a character
        return size + int(_allocated(lengths + _BYTES_HEADER).sum())
    return size + sum(_allocated(sys.getsizeof(item)) for item in flat)


def _allocated(nbytes: Any) -> Any:
    """What the allocator really hands out for objects of ``nbytes``: CPython rounds small
    objects up to 16 bytes."""
    return (nbytes + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT
