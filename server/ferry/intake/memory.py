"""Shared memory between Ferry's processes: memfd segments, opened by the other side through /proc.

Why memfd and not /dev/shm: container runtimes cap /dev/shm at 64 MB by default, and a full tmpfs
kills the writer with SIGBUS; a memfd is charged to the process's memory like any allocation.
The other process maps it by opening ``/proc/<pid>/fd/<fd>`` (same user), so no descriptor has
to travel over a socket.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
from dataclasses import dataclass

ALIGNMENT = 64  # every block starts on a cache line, so numpy views are aligned for any dtype
#: References to a segment's mmap when nothing but the segment uses it: its attribute, and the
#: argument of ``sys.getrefcount``.
_OWN_REFERENCES = 2


@dataclass
class Segment:
    """A memfd this process created (``owner``) or opened from another process, and its mapping."""

    fd: int
    size: int
    buffer: mmap.mmap

    @classmethod
    def create(cls, name: str, size: int) -> Segment:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, max(size, 1))
            return cls(fd, size, mmap.mmap(fd, max(size, 1)))
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def open(cls, pid: int, fd: int, size: int, writable: bool = False) -> Segment:
        """Map another process's segment; read-only unless this side writes into it too."""
        own = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR if writable else os.O_RDONLY)
        try:
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            return cls(own, size, mmap.mmap(own, max(size, 1), access=access))
        except BaseException:
            os.close(own)
            raise

    def give_back(self, start: int, length: int) -> None:
        """Free the pages of [start, start + length) in every process that maps them (a hole punched
        in the memfd: they read as zeros until written again), so an arena holds memory only for
        the blocks in use, not for the largest burst it ever carried."""
        if length:
            self.buffer.madvise(mmap.MADV_REMOVE, start, length)

    def close(self) -> None:
        """Drop this process's descriptor; the mapping lives on while numpy views still use it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def release(self) -> None:
        """Drop the descriptor and unmap now, unless something still uses the mapping (then it goes
        with the last of them): a segment of a process that died must not outlive its use.

        A numpy view of the mapping holds a reference to the mmap, not a buffer export, so closing
        the mmap under it would succeed and unmap memory the view still reads (an engine thread
        computing on a request of an intake that died would crash the model process): the mmap is
        closed only when this segment holds the last reference."""
        self.close()
        if sys.getrefcount(self.buffer) <= _OWN_REFERENCES:
            with contextlib.suppress(BufferError):  # a memoryview exports it: freed with that
                self.buffer.close()


def aligned(nbytes: int) -> int:
    return (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class FirstFit:
    """Blocks of an arena: first fit over a free list kept sorted by offset, neighbours merged.

    Requests and responses are freed in any order, so a ring would stall behind one slow request;
    first fit keeps reusing the low offsets, so the pages touched (and resident) stay few.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._free: list[list[int]] = [[0, size]]  # [offset, size], sorted by offset
        self._used: dict[int, int] = {}
        self.used_bytes = 0

    def allocate(self, nbytes: int) -> int | None:
        """An offset with room for ``nbytes``, or None when no free block is large enough."""
        need = aligned(max(nbytes, 1))
        for index, block in enumerate(self._free):
            offset, size = block
            if size >= need:
                if size == need:
                    del self._free[index]
                else:
                    block[0] += need
                    block[1] -= need
                self._used[offset] = need
                self.used_bytes += need
                return offset
        return None

    def free(self, offset: int) -> tuple[int, int, int]:
        """Give the block at ``offset`` back: (its size, and the start and end of the free block that
        now holds it, merged with its free neighbours)."""
        size = self._used.pop(offset)
        self.used_bytes -= size
        free = self._free
        index = 0
        while index < len(free) and free[index][0] < offset:
            index += 1
        merged_left = index > 0 and free[index - 1][0] + free[index - 1][1] == offset
        if merged_left:
            free[index - 1][1] += size
        else:
            free.insert(index, [offset, size])
            index += 1
        left = free[index - 1]
        if index < len(free) and left[0] + left[1] == free[index][0]:
            left[1] += free[index][1]
            del free[index]
        return size, left[0], left[0] + left[1]


def pages_to_give_back(offset: int, size: int, free_start: int, free_end: int, keep: int) -> tuple[int, int]:
    """The whole pages (start, length) that freeing the block (``offset``, ``size``) left free, in
    the free block [``free_start``, ``free_end``) that now holds it, above the first ``keep`` bytes
    of the arena (kept resident: small requests reuse them without a page fault). Only the freed
    block's own pages and the two it shares with its neighbours can have become free."""
    start = max(_page_up(free_start), _page_down(offset), _page_up(keep))
    end = min(_page_down(free_end), _page_up(offset + size))
    return start, max(0, end - start)


def _page_down(offset: int) -> int:
    return offset // mmap.PAGESIZE * mmap.PAGESIZE


def _page_up(offset: int) -> int:
    return -(-offset // mmap.PAGESIZE) * mmap.PAGESIZE
