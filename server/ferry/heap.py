"""Give large freed buffers back to the operating system (glibc).

Why: glibc serves allocations above its mmap threshold (128 KiB at start) with their own mappings,
returned to the system when freed; but after the first such buffer is freed it raises the threshold
to that buffer's size (up to 32 MiB), so later bodies, tensors and answers come from its heaps, and
what a burst of large requests allocated stays resident after they are answered: the server's
memory follows the largest burst ever seen, not the requests in flight that ``--max-inflight-bytes``
bounds. Fixing the threshold keeps large buffers in their own mappings. Elsewhere (musl, macOS)
this does nothing.

Why 1 MiB and not glibc's initial 128 KiB: a buffer in its own mapping is mapped, faulted in page
by page and unmapped every time. A ResNet-50-sized request (0.6 MB: its body, the pieces and copies
made of it, in the front doors and the intakes) paid that for each of its copies, which cost
several times the copy itself; from the heap, freed memory is reused by the next request. What the
heaps keep is given back by ``HeapTrimmer`` as the smaller pieces' always was, and buffers of a
MiB or more (the memory attacks' tensors, images and bodies) still leave at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from typing import Any

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
#: Allocations from this size on get their own mapping (kept fixed: see above).
THRESHOLD = 2**20


#: Request memory released (bodies, the pieces they were received in, answers) before the heap is
#: trimmed again: a ResNet-50 image every ~50 requests, a tiny model's request every ~100,000.
TRIM_AFTER_BYTES = 32 * 2**20
TRIM_DELAY_S = 0.05
#: Free memory in the heaps that a trim is not worth: under steady traffic what the heaps hold free
#: is the next requests' memory. Trimming it every 32 MiB released gave an intake's pages back
#: (~73 pages a ResNet-50-sized request) only for the next requests to fault them in again, 156-421 us
#: of an intake's CPU per request over gRPC (``benchmarks/results/grpc-intake-read.md``); after a
#: burst the heaps hold far more than this free.
TRIM_ABOVE_FREE_BYTES = 16 * 2**20


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+): what its heaps hold, in bytes."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _glibc(function: str) -> Any:
    """glibc's ``function`` (a ctypes foreign function), or None elsewhere."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), function)
    except (OSError, AttributeError):  # not glibc
        return None


def return_large_buffers() -> bool:
    """Fix glibc's mmap threshold at ``THRESHOLD``; True when it was set."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD))


class HeapTrimmer:
    """Gives the free pages inside glibc's heaps back once requests released ``TRIM_AFTER_BYTES``
    and the heaps hold ``TRIM_ABOVE_FREE_BYTES`` or more free (where glibc says: ``mallinfo2``).

    Why: what is smaller than ``THRESHOLD`` comes from the heaps: the 64 KiB pieces a large body is
    received in, and bodies, tensors and copies under a MiB. Freed while later allocations still sit
    above them, those pages stay resident: after a burst of large requests an intake process kept 60-180 MB that nothing
    used, and the next burst came on top of it, past what admission counted. ``malloc_trim`` frees
    every whole free page of every heap; it runs on a worker thread (it walks the heaps), one at a time.
    """

    def __init__(self, after_bytes: int = TRIM_AFTER_BYTES, above_free_bytes: int = TRIM_ABOVE_FREE_BYTES) -> None:
        self.after_bytes = after_bytes
        self.above_free_bytes = above_free_bytes
        self._released = 0
        self._running = False
        self._trim = _glibc("malloc_trim")
        if self._trim is not None:
            self._trim.argtypes = (ctypes.c_size_t,)
            self._trim.restype = ctypes.c_int
        self._mallinfo = _glibc("mallinfo2")
        if self._mallinfo is not None:
            self._mallinfo.argtypes = ()
            self._mallinfo.restype = MallInfo2

    def released(self, nbytes: int) -> None:
        """Request memory of ``nbytes`` was freed; trim when enough was, and no trim is running."""
        self._released += nbytes
        if self._released < self.after_bytes or self._running or self._trim is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving (a test's admission): nothing to give back
            return
        self._released = 0
        self._running = True
        # a moment later: what was uncounted is freed when the request's frames and answer go
        loop.call_later(
            TRIM_DELAY_S, lambda: loop.run_in_executor(None, self._trim_when_worth_it).add_done_callback(self._done)
        )

    def _trim_when_worth_it(self) -> None:
        """``malloc_trim`` (it walks the heaps: on a worker thread), unless they hold less than
        ``above_free_bytes`` free."""
        assert self._trim is not None
        if self._mallinfo is not None:
            info = self._mallinfo()
            if info.fordblks + info.fsmblks < self.above_free_bytes:
                return
        self._trim(0)

    def _done(self, _: object) -> None:
        self._running = False
        self.released(0)  # what was released during the trim, if enough, is not left for later traffic
