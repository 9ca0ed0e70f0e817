"""Give freed model memory back to the operating system after an unload.

glibc raises its mmap threshold after large frees, so the next model's multi-megabyte weight
buffers come from the heap; freed, they stay in the process (RSS) until trimmed. After a model
closes, ``malloc_trim(0)`` returns those free pages, so an unload really lowers the footprint.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name or "libc.so.6")
    except OSError:
        return None


def release_free_memory() -> bool:
    """Collect garbage and trim the C heap; True when the trim ran (glibc only)."""
    gc.collect()
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return False
    trim(0)
    return True
