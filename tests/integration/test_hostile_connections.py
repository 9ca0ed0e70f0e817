"""Hostile connections (issue 15): half-sent headers, huge headers, bodies that never arrive, a flood
of connections, thousands of gRPC streams. Each test first establishes the attack (the server reports
the connections open, or the refusals counted), then checks the clean answer, that other clients are
still served (a correct answer, with a client timeout that only catches a stalled server) while the attack
is in place, and that RSS stays bounded. No assertion on how long anything took.

The server runs with small limits so every timeout fires within seconds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import grpc
import numpy as np
import psutil
import pytest

from ferry_client import AsyncGrpcClient, GrpcClient, HttpClient
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model
from ..server_metrics import metric, scrape, wait_for_metric

TOKEN = "hostile-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_CONNECTIONS = 48
HEADER_TIMEOUT_S = 3
BODY_GRACE_S = 4
MIN_BODY_RATE = 1024
STREAMS_PER_CONNECTION = 16
MAX_RPCS = 64
#: How long a well-behaved client waits for its answer: an idle server answers in milliseconds, so this
#: only catches a server stalled by the attack (its calls fail with a timeout), never a slow machine.
STALLED_S = 60.0
#: RSS growth allowed during one attack (the attacks sent would cost hundreds of MB unbounded).
RSS_BOUND = 100 * 2**20
WIDTH = 64
GATED = "gated"  # keeps what it is sent until unloaded


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_connections") / "models"
    write_mlp_model(repo / "quick", width=WIDTH, layers=1, extra_config="dynamic_batching { }\n")
    write_mlp_model(
        repo / GATED,
        width=WIDTH,
        layers=1,
        max_batch_size=1024,
        extra_config="dynamic_batching { preferred_batch_size: [ 1024 ] max_queue_delay_microseconds: 600000000 }\n",
    )
    running = start_server(
        repo,
        repo.parent / "server.log",
        *("--model-control-mode", "explicit", "--load-model", "*"),
        "--http-max-connections",
        str(MAX_CONNECTIONS),
        "--http-header-timeout-secs",
        str(HEADER_TIMEOUT_S),
        "--http-min-body-rate",
        str(MIN_BODY_RATE),
        "--http-body-grace-secs",
        str(BODY_GRACE_S),
        "--grpc-max-concurrent-streams",
        str(STREAMS_PER_CONNECTION),
        "--grpc-max-concurrent-rpcs",
        str(MAX_RPCS),
        "--auth-metrics",
        env={"FERRY_AUTH_TOKENS": TOKEN},
        probe_headers=AUTH,
    )
    yield running
    running.stop()


def _rss(server: RunningServer) -> int:
    return psutil.Process(server.process.pid).memory_info().rss


async def _open(server: RunningServer, first_bytes: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
    writer.write(first_bytes)
    await writer.drain()
    return reader, writer


async def _answer(reader: asyncio.StreamReader, timeout: float = 60) -> bytes:
    """Everything the server sends until it closes the connection."""
    return await asyncio.wait_for(reader.read(), timeout)


async def _served(server: RunningServer) -> None:
    """One gRPC inference (another listener) while the attack is in place, answered right."""
    async with AsyncGrpcClient(server.grpc_url, headers=AUTH, timeout=STALLED_S) as client:
        result = await client.infer("quick", {"x": np.ones((1, WIDTH), np.float32)})
    assert result["y"].shape == (1, WIDTH)


def _rest_infer(server: RunningServer) -> None:
    with HttpClient(server.http_url, headers=AUTH, timeout=STALLED_S) as client:
        assert client.infer("quick", {"x": np.ones((1, WIDTH), np.float32)})["y"].shape == (1, WIDTH)


def _open_connections(server: RunningServer) -> float:
    return metric(scrape(server, AUTH), "ferry_http_open_connections", listener="rest")


def _gated_request() -> bytes:
    """A complete request the gated model keeps until it is unloaded: its connection is open, and no
    timer of the server's runs on it (headers and body are in), so it holds its place for as long as
    the test needs, however slow the machine."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, WIDTH], "datatype": "FP32", "data": [1.0] * WIDTH}]})
    head = (
        f"POST /v2/models/{GATED}/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return (head + body).encode()


def test_a_full_connection_cap_refuses_cleanly_and_frees_itself(guarded) -> None:
    """The cap filled by connections the gated model holds: past it new ones get an immediate 503
    (no descriptor exhaustion) and gRPC keeps serving; once the model lets them go they are
    answered, and the cap has them back. (Filled with half-sent headers, the cap would empty itself
    after the header timeout, however far the test had got: see the next test.)"""
    rss_before = _rss(guarded)
    fds_before = psutil.Process(guarded.process.pid).num_fds()

    async def run() -> None:
        held = [await _open(guarded, _gated_request()) for _ in range(MAX_CONNECTIONS)]
        await wait_for_metric(
            guarded, "nv_inference_pending_request_count", MAX_CONNECTIONS, headers=AUTH, model=GATED, version="1"
        )
        extra = [await _open(guarded, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n") for _ in range(200)]
        refusals = await asyncio.gather(*(_answer(reader) for reader, _ in extra))
        for answer in refusals:
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:80]
            assert b"too many open connections (limit 48, --http-max-connections)" in answer
        for _, writer in extra:
            writer.close()
        # refused connections are freed (not left to exhaust descriptors): only the held ones remain
        deadline = time.monotonic() + 30
        while psutil.Process(guarded.process.pid).num_fds() > fds_before + MAX_CONNECTIONS + 10:
            assert time.monotonic() < deadline, psutil.Process(guarded.process.pid).num_fds()
            await asyncio.sleep(0.05)
        await _served(guarded)  # with the REST cap full
        assert await asyncio.to_thread(_open_connections, guarded) == MAX_CONNECTIONS  # full all along
        await asyncio.to_thread(_repository, guarded, "unload")  # runs what the gated model holds
        for answer in await asyncio.gather(*(_answer(reader) for reader, _ in held)):
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
        for _, writer in held:
            writer.close()
        await asyncio.to_thread(_repository, guarded, "load")

    asyncio.run(run())
    _rest_infer(guarded)  # the cap freed itself
    assert _rss(guarded) - rss_before < RSS_BOUND


def _repository(server: RunningServer, action: str) -> None:
    """Over gRPC: the REST cap may be full."""
    with GrpcClient(server.grpc_url, headers=AUTH, timeout=STALLED_S) as client:
        (client.unload_model if action == "unload" else client.load_model)(GATED)


def test_half_sent_headers_hold_a_place_until_the_header_timeout(guarded) -> None:
    """Connections that never finish their headers count against the cap while they are open, get
    408 naming the flag after the header timeout, and give their places back."""

    async def run() -> None:
        held = [await _open(guarded, b"POST /v2/models/quick/infer HTTP/1.1\r\nHost: x\r\n") for _ in range(8)]
        await wait_for_metric(guarded, "ferry_http_open_connections", 8, headers=AUTH, listener="rest")
        timeouts = await asyncio.gather(*(_answer(reader) for reader, _ in held))
        for answer in timeouts:
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
            assert b"request headers not received within 3 s (--http-header-timeout-secs)" in answer
        for _, writer in held:
            writer.close()
        await wait_for_metric(guarded, "ferry_http_open_connections", 0, headers=AUTH, at_most=True, listener="rest")

    asyncio.run(run())


def test_huge_headers_are_refused_before_auth_with_bounded_memory(guarded) -> None:
    """Ten connections each sending megabytes of header and no token: 431 at 64 KiB each."""
    rss_before = _rss(guarded)
    line = b"X-Filler: " + b"a" * 1000 + b"\r\n"

    async def one() -> bytes:
        reader, writer = await _open(guarded, b"GET /v2/models/quick HTTP/1.1\r\nHost: x\r\n")
        answer = asyncio.ensure_future(_answer(reader))
        for _ in range(32):  # up to 2 MB; the server answers after 64 KiB, and the client stops then
            if answer.done():
                break
            writer.write(line * 64)
            await writer.drain()
        result = await answer
        writer.close()
        return result

    async def run() -> list[bytes]:
        return await asyncio.gather(*(one() for _ in range(10)))

    for answer in asyncio.run(run()):
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
        assert b"request line and headers exceed 65536 bytes (--http-max-header-bytes)" in answer
    assert _rss(guarded) - rss_before < RSS_BOUND
    _rest_infer(guarded)


def test_bodies_that_never_arrive_hold_no_admission_and_are_cut(guarded) -> None:
    """Requests announcing 128 MiB bodies and trickling almost nothing: admitted, but holding only the
    bytes that arrived, so others are served; closed with 408 once behind the minimum rate."""
    head = (
        b"POST /v2/models/quick/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + TOKEN.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 134217728\r\n\r\n{"
    )

    async def run() -> None:
        before = metric(await asyncio.to_thread(scrape, guarded, AUTH), "ferry_inflight_requests")
        held = [await _open(guarded, head) for _ in range(8)]
        await wait_for_metric(guarded, "ferry_inflight_requests", before + 8, headers=AUTH)
        assert metric(await asyncio.to_thread(scrape, guarded, AUTH), "ferry_inflight_bytes") < 2**20
        await _served(guarded)
        await asyncio.to_thread(_rest_infer, guarded)
        for answer in await asyncio.gather(*(_answer(reader) for reader, _ in held)):
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
            assert b"request body arrived slower than 1024 bytes/s" in answer
        for _, writer in held:
            writer.close()
        await wait_for_metric(guarded, "ferry_inflight_requests", 0, headers=AUTH, at_most=True)

    asyncio.run(run())


def test_idle_connection_before_the_first_request_is_closed(guarded) -> None:
    async def run() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", guarded.http_port)
        answer = await _answer(reader)
        writer.close()
        return answer

    assert asyncio.run(run()).startswith(b"HTTP/1.1 408 ")


def test_metrics_port_needs_the_token_on_every_path(guarded) -> None:
    import urllib.error
    import urllib.request

    for path in ("/", "/metrics", "/anything"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{guarded.metrics_port}{path}", timeout=10)
        assert refused.value.code == 401, path
    assert "nv_cpu_utilization" in scrape(guarded, AUTH)


def test_thousands_of_grpc_streams_are_bounded(guarded) -> None:
    """20 connections of one address each opening 16 streams that stay open: the address holds at
    most half of the server's 64 calls (so never all of grpc's cap), the rest are refused at once
    with RESOURCE_EXHAUSTED naming the per-peer cap, memory stays bounded, REST is unaffected, and
    everything is released when the streams go away."""
    rss_before = _rss(guarded)
    connections, per_connection = 20, STREAMS_PER_CONNECTION
    metadata = (("authorization", AUTH["Authorization"]),)
    held_count = MAX_RPCS // 2  # one address: at most half of grpc's cap
    refused_count = connections * per_connection - held_count

    async def run() -> None:
        # a local subchannel pool: otherwise channels to one address share one TCP connection
        options = [("grpc.use_local_subchannel_pool", 1)]
        channels = [grpc.aio.insecure_channel(guarded.grpc_url, options=options) for _ in range(connections)]
        release = asyncio.Event()

        async def silence():  # a stream that sends nothing until released
            await release.wait()
            return
            yield  # pragma: no cover - makes this an async generator

        async def outcome(call) -> grpc.StatusCode:
            try:
                async for _ in call:
                    pass
            except grpc.aio.AioRpcError as exc:
                assert exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or "--grpc-max-calls-per-peer" in exc.details()
                return exc.code()
            return grpc.StatusCode.OK

        calls = [
            pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(silence(), metadata=metadata)
            for channel in channels
            for _ in range(per_connection)
        ]
        waiting = [asyncio.ensure_future(outcome(call)) for call in calls]
        deadline = time.monotonic() + 60
        # the attack state: every call past the cap refused (so the other 64 hold the server's slots)
        while sum(1 for w in waiting if w.done()) < refused_count:
            assert time.monotonic() < deadline, sum(1 for w in waiting if w.done())
            await asyncio.sleep(0.05)
        refused = [w.result() for w in waiting if w.done()]
        assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * refused_count
        await asyncio.to_thread(_rest_infer, guarded)
        assert _rss(guarded) - rss_before < RSS_BOUND
        release.set()
        assert sorted(await asyncio.gather(*waiting), key=str).count(grpc.StatusCode.OK) == held_count
        for channel in channels:
            await channel.close()

    asyncio.run(run())
    with grpc.insecure_channel(guarded.grpc_url) as channel:  # calls are free again
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(pb.ServerLiveRequest(), metadata=(("authorization", AUTH["Authorization"]),)).live
