"""The heap trimmer (ferry.heap): what requests release goes back to the system, bursts included."""

from __future__ import annotations

import asyncio
import threading

from ferry import heap


async def _until(condition, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def test_what_is_released_during_a_trim_is_trimmed_after_it() -> None:
    # the end of a burst: its last requests release their memory while a trim runs; with nothing
    # released afterwards, that memory used to stay until the next traffic
    trimmer = heap.HeapTrimmer(after_bytes=100, above_free_bytes=0)
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


async def test_a_trim_is_left_out_while_the_heaps_hold_little_free() -> None:
    # steady traffic: what the heaps hold free is the next requests' memory, not worth a trim
    trimmer = heap.HeapTrimmer(after_bytes=100, above_free_bytes=1000)
    free = [999]
    trimmer._mallinfo = lambda: heap.MallInfo2(fordblks=free[0])
    trims: list[int] = []

    def trim(pad: int) -> int:
        trims.append(pad)
        return 1

    trimmer._trim = trim
    for expected, free_bytes in (([], 999), ([0], 1000)):
        free[0] = free_bytes
        trimmer.released(100)
        assert trimmer._running  # a check is on its way
        await _until(lambda: not trimmer._running)
        assert trims == expected
