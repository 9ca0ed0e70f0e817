"""Give large freed buffers back to the operating system (glibc).

Why: glibc serves allocations above its mmap threshold (128 KiB at start) with their own mappings,
returned to the system when freed; but after the first such buffer is freed it raises the threshold
to that buffer's size (up to 32 MiB), so later bodies, tensors and answers come from its heaps, and
what a burst of large requests allocated stays resident after they are answered: the server's
memory follows the largest burst ever seen, not the requests in flight that ``--max-inflight-bytes``
bounds. Fixing the threshold keeps large buffers in their own mappings. Elsewhere (musl, macOS)
this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
#: Allocations from this size on get their own mapping (glibc's initial threshold, kept fixed).
THRESHOLD = 128 * 1024


def return_large_buffers() -> bool:
    """Fix glibc's mmap threshold at ``THRESHOLD``; True when it was set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD))
