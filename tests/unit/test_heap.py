"""The heap trimmer (ferry.heap): what requests release goes back to the system, bursts included."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest

from ferry import heap


async def _until(condition, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def test_what_is_released_during_a_trim_is_trimmed_after_it() -> None:
    # the end of a burst: its last requests release their memory while a trim runs; with nothing
    # released afterwards, that memory used to stay until the next traffic
    trimmer = heap.HeapTrimmer(after_bytes=100)
    running = threading.Event()
    finish = threading.Event()
    trims: list[int] = []  # malloc_trim's calls

    def trim(pad: int) -> int:
        trims.append(pad)
        running.set()
        finish.wait(10)
        return 1

    trimmer._trim = trim
    trimmer.released(100)
    await _until(running.is_set)
    trimmer.released(100)  # during the trim: not another at once (one at a time)
    finish.set()
    await _until(lambda: len(trims) == 2)


async def test_steady_traffic_is_not_trimmed_until_it_pauses(monkeypatch) -> None:
    # trimmed every 32 MiB released, an intake under steady 0.6 MB requests gave its heap pages back
    # every ~50 requests and faulted them in again: now the trim waits until nothing was released
    # for a delay (the loop's clock is the test's, so each delay passes when the test says)
    loop = asyncio.get_running_loop()
    now = [loop.time()]
    monkeypatch.setattr(loop, "time", lambda: now[0])
    trimmer = heap.HeapTrimmer(after_bytes=100)
    trims: list[int] = []
    trimmer._trim = trims.append

    async def after_delay() -> None:  # the pending look at the traffic runs
        now[0] += heap.TRIM_DELAY_S * 1.5
        for _ in range(10):
            await asyncio.sleep(0)

    trimmer.released(100)
    for _ in range(3):
        trimmer.released(1)  # a request ended within the delay: the traffic goes on
        await after_delay()
        assert trims == []
    await after_delay()  # a delay with nothing released: the trim (on a worker thread)
    await _spin_until(lambda: trims == [0])


async def test_traffic_that_never_pauses_is_trimmed_after_its_larger_budget(monkeypatch) -> None:
    loop = asyncio.get_running_loop()
    now = [loop.time()]
    monkeypatch.setattr(loop, "time", lambda: now[0])
    trimmer = heap.HeapTrimmer(after_bytes=100, busy_after_bytes=1000)
    trims: list[int] = []
    trimmer._trim = trims.append
    trimmer.released(100)
    for _ in range(3):
        trimmer.released(300)  # never a pause, and past the budget after the third
        now[0] += heap.TRIM_DELAY_S * 1.5
        await asyncio.sleep(0)
    await _spin_until(lambda: trims == [0])


async def _spin_until(condition, timeout: float = 10.0) -> None:
    """``_until`` for a test that drives the loop's clock itself (its timers never fire alone)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0)


_FREE_AT_THE_TOP = """
import ctypes, ctypes.util, os
from ferry import heap
assert heap.return_large_buffers()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
resident = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
buffers = [libc.malloc(600 * 1024) for _ in range(8)]  # eight ResNet-50 requests' copies, from the heap
for buffer in buffers:
    ctypes.memset(buffer, 1, 600 * 1024)
before = resident()
for buffer in reversed(buffers):  # freed at the top of the heap
    libc.free(buffer)
print(before - resident())
"""


@pytest.mark.skipif(heap._glibc("mallopt") is None, reason="glibc's heap")
def test_buffers_freed_at_the_top_of_the_heap_stay_for_the_next_requests() -> None:
    # fixing the mmap threshold left glibc's trim threshold at 128 KiB: every free at the top of
    # the heap gave its pages back (4.8 MB here), and the next request faulted them in again
    given_back = subprocess.run([sys.executable, "-c", _FREE_AT_THE_TOP], capture_output=True, text=True, check=True)
    assert int(given_back.stdout) < 600 * 1024, given_back.stdout
