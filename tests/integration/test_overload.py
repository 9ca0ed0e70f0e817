"""Overload: with the in-flight cap provably full, every further request gets an immediate 503 +
Retry-After / UNAVAILABLE naming the cap, nothing hangs, the held requests then complete, and the
server's memory stays bounded.

The cap is filled deterministically, not by hoping the model is slow: model ``gated`` batches with a
preferred size of 1024 rows and a ten-minute ``max_queue_delay``, so the 1-row requests sent to it
stay queued (admitted, in flight) until the test unloads it, which sends what is queued at once.
The tests wait until /metrics reports the held requests pending before they burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import aiohttp
import grpc
import numpy as np
import psutil
import pytest

from ferry_client import GrpcClient, HttpClient
from ferry_client.codec import HEADER_LENGTH

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model
from ..server_metrics import metric, scrape, wait_for_metric

WIDTH = 1024
CAP = 32
BURST = 400
BYTES_CAP = 2 * 1024 * 1024
GATED = "gated"  # holds what it is sent until unloaded
QUICK = "quick"  # answers at once


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("overload") / "models"
    write_mlp_model(
        repo / GATED,
        width=WIDTH,
        layers=2,
        max_batch_size=1024,
        extra_config="dynamic_batching { preferred_batch_size: [ 1024 ] max_queue_delay_microseconds: 600000000 }\n",
    )
    write_mlp_model(repo / QUICK, width=WIDTH, layers=2, extra_config="dynamic_batching { }\n")
    running = start_server(
        repo,
        repo.parent / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        GATED,
        "--load-model",
        QUICK,
        "--max-inflight-requests",
        str(CAP),
        "--max-inflight-bytes",
        str(BYTES_CAP),
    )
    yield running
    running.stop()


def _rss(server: RunningServer) -> int:
    return psutil.Process(server.process.pid).memory_info().rss


def _binary_body(rows: int) -> tuple[bytes, dict[str, str]]:
    """Binary both ways: a JSON answer would reserve the peak of its encoding (~64 bytes a number),
    more than this server's 2 MiB byte cap lets five released requests hold at once."""
    x = np.ones((rows, WIDTH), np.float32)
    header = (
        b'{"inputs":[{"name":"x","shape":[%d,%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}],'
        b'"outputs":[{"name":"y","parameters":{"binary_data":true}}]}' % (rows, WIDTH, x.nbytes)
    )
    return header + x.tobytes(), {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}


async def _http_send(
    session: aiohttp.ClientSession, server: RunningServer, model: str, rows: int = 1
) -> tuple[int, str, str | None]:
    body, headers = _binary_body(rows)
    url = f"http://{server.http_url}/v2/models/{model}/infer"
    async with session.post(url, data=body, headers=headers) as response:
        return response.status, await response.text(errors="replace"), response.headers.get("Retry-After")


async def _repository(session: aiohttp.ClientSession, server: RunningServer, action: str) -> None:
    async with session.post(f"http://{server.http_url}/v2/repository/models/{GATED}/{action}") as response:
        assert response.status == 200, await response.text()


@contextlib.asynccontextmanager
async def held(server: RunningServer, count: int, rows: int = 1) -> AsyncIterator[None]:
    """Hold ``count`` requests of ``rows`` rows queued (admitted, in flight) for the block's duration;
    on exit unload ``gated`` (which runs what it holds at once), check every held request succeeded,
    and load it again."""
    connector = aiohttp.TCPConnector(limit=count + 1)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        holders = [asyncio.ensure_future(_http_send(session, server, GATED, rows)) for _ in range(count)]
        try:
            await wait_for_metric(server, "nv_inference_pending_request_count", count, model=GATED, version="1")
            assert metric(await asyncio.to_thread(scrape, server), "ferry_inflight_requests") == count
            yield
        finally:
            await _repository(session, server, "unload")
            results = await asyncio.gather(*holders)
            await _repository(session, server, "load")
    assert [status for status, _, _ in results] == [200] * count, results[:2]


async def _http_burst(server: RunningServer, count: int, rows: int = 1) -> list[tuple[int, str, str | None]]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=count)) as session:
        return await asyncio.wait_for(
            asyncio.gather(*(_http_send(session, server, QUICK, rows) for _ in range(count))), timeout=120
        )


async def _grpc_burst(server: RunningServer, count: int) -> Counter:
    from ferry_client import AsyncGrpcClient

    x = np.ones((1, WIDTH), np.float32)
    outcomes: Counter = Counter()
    async with AsyncGrpcClient(server.grpc_url) as client:

        async def one() -> None:
            try:
                await client.infer(QUICK, {"x": x})
                outcomes["ok"] += 1
            except Exception as exc:  # noqa: BLE001 - classified below
                outcomes[f"{getattr(exc, 'grpc_code', None)}: {exc}"] += 1

        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))), timeout=120)
    return outcomes


def test_http_burst_far_above_capacity(busy_server) -> None:
    rss_before = _rss(busy_server)

    async def run() -> list[tuple[int, str, str | None]]:
        async with held(busy_server, CAP):
            return await _http_burst(busy_server, BURST)

    started = time.monotonic()
    results = asyncio.run(run())
    elapsed = time.monotonic() - started
    statuses = Counter(status for status, _, _ in results)
    assert statuses == {503: BURST}, statuses
    for _, text, retry_after in results:
        assert f"server overloaded: {CAP} requests in flight (limit {CAP}, --max-inflight-requests)" in text
        assert retry_after == "1"
    growth = _rss(busy_server) - rss_before
    print(
        f"HTTP burst of {BURST} on a full cap: {dict(statuses)} in {elapsed:.1f} s, RSS growth {growth / 2**20:.1f} MiB"
    )
    assert growth < 200 * 2**20
    with HttpClient(busy_server.http_url) as client:  # and it serves normally once the cap frees
        assert client.infer(QUICK, {"x": np.ones((1, WIDTH), np.float32)})["y"].shape == (1, WIDTH)


def test_grpc_burst_far_above_capacity(busy_server) -> None:
    async def run() -> Counter:
        async with held(busy_server, CAP):
            return await _grpc_burst(busy_server, BURST)

    outcomes = asyncio.run(run())
    (outcome, count), *others = outcomes.items()
    assert count == BURST and not others, outcomes
    assert outcome.startswith(str(grpc.StatusCode.UNAVAILABLE)), outcome
    assert f"server overloaded: {CAP} requests in flight (limit {CAP}, --max-inflight-requests)" in outcome
    with GrpcClient(busy_server.grpc_url) as client:
        assert client.infer(QUICK, {"x": np.ones((1, WIDTH), np.float32)})["y"].shape == (1, WIDTH)


def test_bytes_in_flight_are_capped(busy_server) -> None:
    """Five held requests of 32 rows hold 1.25 MiB (their bodies, and outputs as large counted
    before the model runs): a 1 MiB request no longer fits under the 2 MiB cap."""

    async def run() -> list[tuple[int, str, str | None]]:
        async with held(busy_server, 5, rows=32):
            return await _http_burst(busy_server, 12, rows=256)

    results = asyncio.run(run())
    assert Counter(status for status, _, _ in results) == {503: 12}
    assert all("--max-inflight-bytes" in text for _, text, _ in results), results[0]


def test_client_retries_ride_out_overload(busy_server) -> None:
    """ferry_client's retries (honouring Retry-After) turn requests refused while the cap is full
    into successes once it frees."""

    async def run() -> Counter:
        from ferry_client import AsyncHttpClient

        outcomes: Counter = Counter()
        x = np.ones((1, WIDTH), np.float32)
        async with AsyncHttpClient(busy_server.http_url, retries=30, backoff=0.05, max_backoff=1.0) as client:

            async def one() -> None:
                await client.infer(QUICK, {"x": x})
                outcomes["ok"] += 1

            async with held(busy_server, CAP):
                refused = metric(await asyncio.to_thread(scrape, busy_server), "ferry_admission_rejected_total")
                retrying = [asyncio.ensure_future(one()) for _ in range(100)]
                # every one of the 100 is refused at least once while the cap is held
                await wait_for_metric(busy_server, "ferry_admission_rejected_total", refused + 100)
            await asyncio.wait_for(asyncio.gather(*retrying), timeout=180)
        return outcomes

    assert asyncio.run(run())["ok"] == 100


def test_a_queued_request_whose_client_leaves_is_dropped(busy_server) -> None:
    """A REST client that hangs up while its request waits in the queue frees its admission and its
    place in the queue at once (the gated model would otherwise hold it for ten minutes)."""
    body, headers = _binary_body(1)
    head = f"POST /v2/models/{GATED}/infer HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    host, port = busy_server.http_url.split(":")
    with socket.create_connection((host, int(port))) as client:
        client.sendall(head.encode() + body)
        asyncio.run(wait_for_metric(busy_server, "nv_inference_pending_request_count", 1, model=GATED, version="1"))
        assert metric(scrape(busy_server), "ferry_inflight_requests") == 1
    asyncio.run(
        wait_for_metric(busy_server, "nv_inference_pending_request_count", 0, at_most=True, model=GATED, version="1")
    )
    asyncio.run(wait_for_metric(busy_server, "ferry_inflight_requests", 0, at_most=True))
