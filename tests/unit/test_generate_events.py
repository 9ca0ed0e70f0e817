"""REST ``generate_stream``'s events: a large one is encoded on the pool the route is given (the
process's codec threads, ``ferry.workers``), never on the event loop nor on asyncio's default
executor, which ``workers.py`` keeps for work that is not a request's."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ferry.api import generate
from ferry.api.limits import OFF_LOOP_BYTES
from ferry.api.response_size import JSON_BYTES_PER_ELEMENT
from ferry.types import InferenceResponse, OutputTensor


class RecordingPool(ThreadPoolExecutor):
    """A one-thread pool that records the functions it is handed."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.calls: list[Callable[..., Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        self.calls.append(fn)
        return super().submit(fn, *args, **kwargs)


def _response(elements: int) -> InferenceResponse:
    data = np.arange(elements, dtype=np.float32)
    return InferenceResponse("stream", "1", outputs=[OutputTensor("OUT", "FP32", data)])


async def test_a_large_event_is_encoded_on_the_pool_it_is_given() -> None:
    pool = RecordingPool()
    try:
        large = _response(OFF_LOOP_BYTES // JSON_BYTES_PER_ELEMENT)  # estimated at OFF_LOOP_BYTES as JSON
        event = await generate._event(large, pool)
        assert pool.calls == [generate._encoded_event]
        assert event == generate._encoded_event(large)
    finally:
        pool.shutdown()


async def test_a_small_event_is_encoded_on_the_loop() -> None:
    pool = RecordingPool()
    try:
        small = _response(16)
        assert await generate._event(small, pool) == generate._encoded_event(small)
        assert pool.calls == []
    finally:
        pool.shutdown()
