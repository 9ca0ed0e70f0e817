"""Bursts (issue 24): a server that falls behind must not blame its clients for it.

The header timeout measures a client's slowness, not the server's backlog. The test causes the
backlog instead of hoping a burst produces one: connections are accepted, the processes serving the
REST port are stopped (SIGSTOP) while every client sends its complete request, and they resume only
after the header timeout has passed. The requests were there all along: each must be answered
(200), not refused with 408. A client that really sends nothing still gets its 408.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import psutil
import pytest

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model
from ..server_metrics import wait_for_metric

pytestmark = pytest.mark.timeout(120)

HEADER_TIMEOUT_S = 2
CLIENTS = 50


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def bursty(request, tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_bursts") / "models"
    write_mlp_model(repo / "quick", width=16, layers=1)
    extra = ["--intake-processes", "2"] if request.param == "2 intake processes" else []
    running = start_server(
        repo, repo.parent / "server.log", "--http-header-timeout-secs", str(HEADER_TIMEOUT_S), *extra
    )
    yield running
    running.stop()


def _rest_processes(server: RunningServer) -> list[psutil.Process]:
    """The processes that read the REST port: the intakes when there are any, else the server."""
    return psutil.Process(server.process.pid).children() or [psutil.Process(server.process.pid)]


async def _answer(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), 60)


async def test_requests_that_waited_on_a_stalled_server_are_served_not_timed_out(bursty) -> None:
    async def run() -> list[bytes]:
        clients = [await asyncio.open_connection("127.0.0.1", bursty.http_port) for _ in range(CLIENTS)]
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", bursty.http_port)
        await wait_for_metric(bursty, "ferry_http_open_connections", CLIENTS + 1, listener="rest")
        stopped = _rest_processes(bursty)
        for process in stopped:
            os.kill(process.pid, signal.SIGSTOP)
        try:
            for _, writer in clients:  # complete requests, sitting unread in the kernel's buffers
                writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                await writer.drain()
            await asyncio.sleep(HEADER_TIMEOUT_S + 1.5)  # every header timer is due when they resume
        finally:
            for process in stopped:
                os.kill(process.pid, signal.SIGCONT)
        answers = await asyncio.gather(*(_answer(reader) for reader, _ in clients))
        idle = await _answer(idle_reader)  # sent nothing: its own slowness, so 408
        for _, writer in [*clients, (idle_reader, idle_writer)]:
            writer.close()
        return [*answers, idle]

    *answers, idle = await run()
    statuses = sorted({answer.split(b"\r\n", 1)[0] for answer in answers})
    assert statuses == [b"HTTP/1.1 200 OK"], statuses
    assert idle.startswith(b"HTTP/1.1 408 "), idle[:80]
