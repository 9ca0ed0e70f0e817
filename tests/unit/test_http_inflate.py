"""A compressed request body is inflated on the codec pool, never on the event loop (issue 15).

The test holds the pool: each inflation step waits at a gate the test opens. While a step is held
there, the event loop runs other requests' work, and the body is not done; once the gate opens, the
body comes out whole. Had a step run on the loop, the pool would never see it (and the loop would
have been busy for the whole inflation). A bomb is cut at the body limit, step by step."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest
from starlette.requests import Request

from ferry.api.http_codec import INFLATE_STEP
from ferry.api.http_requests import read_body
from ferry.errors import PayloadTooLarge
from ferry.workers import Workers

pytestmark = pytest.mark.timeout(60)
MIB = 2**20


class GatedPool(Executor):
    """A thread pool whose calls wait at a gate: ``entered`` is set once one is held there."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.calls = 0
        self._pool = ThreadPoolExecutor(1)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.calls += 1

        def held() -> Any:
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
            return fn(*args, **kwargs)

        return self._pool.submit(held)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.gate.set()
        self._pool.shutdown(wait, cancel_futures=cancel_futures)


@pytest.fixture
def pool() -> Iterator[GatedPool]:
    gated = GatedPool()
    yield gated
    gated.shutdown()


def _workers(codec: GatedPool) -> Workers:
    """A process's pools whose codec pool is the gated one."""
    workers = Workers(image_workers=1)
    workers.codec.shutdown()
    workers.codec = codec  # type: ignore[assignment]
    return workers


def _gzip_request(plain: bytes) -> Request:
    body = gzip.compress(plain)
    headers = [(b"content-encoding", b"gzip"), (b"content-length", str(len(body)).encode())]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive)


async def test_inflating_runs_on_the_pool_while_the_loop_serves_others(pool: GatedPool) -> None:
    plain = bytes(range(256)) * (3 * INFLATE_STEP // 256)  # three steps
    reading = asyncio.create_task(read_body(_gzip_request(plain), 64 * MIB, _workers(pool)))
    entered = await asyncio.to_thread(pool.entered.wait, 10)
    assert entered, "no inflation step reached the codec pool"
    assert not reading.done()  # a step is held on the pool, and the loop is free: this coroutine runs
    pool.gate.set()
    assert await reading == plain
    assert pool.calls >= 3  # one pool call per step


async def test_a_bomb_is_cut_at_the_body_limit(pool: GatedPool) -> None:
    pool.gate.set()
    with pytest.raises(PayloadTooLarge, match=f"decompressed request body exceeds the limit of {8 * MIB} bytes"):
        await read_body(_gzip_request(bytes(32 * MIB)), 8 * MIB, _workers(pool))
    assert pool.calls == 1  # the first step already passes the limit: no more is inflated
