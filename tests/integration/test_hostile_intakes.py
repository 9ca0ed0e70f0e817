"""Attacks on the intake processes (issue 24): an intake killed again and again, with requests of
its own held in the model process when it dies, must leave nothing behind in the model process:
neither its arenas' mappings nor their resident pages.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import aiohttp
import numpy as np
import psutil
import pytest

from ferry_client.codec import HEADER_LENGTH

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model
from ..server_metrics import metric, scrape, wait_for_metric

pytestmark = pytest.mark.timeout(180)

WIDTH = 1024
ARENA_BYTES = 4 * 2**20
ROWS = 768  # 3 MiB a request and an answer: most of an arena's pages get touched
KILLS = 3
GATED = "gated"  # holds what it is sent until unloaded


@pytest.fixture(scope="module")
def intakes(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_intakes") / "models"
    write_mlp_model(repo / "quick", width=WIDTH, layers=1, max_batch_size=4096)
    write_mlp_model(
        repo / GATED,
        width=WIDTH,
        layers=1,
        max_batch_size=4096,
        extra_config="dynamic_batching { preferred_batch_size: [ 4096 ] max_queue_delay_microseconds: 600000000 }\n",
    )
    running = start_server(
        repo,
        repo.parent / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--intake-processes",
        "2",
        "--intake-arena-bytes",
        str(ARENA_BYTES),
    )
    yield running
    running.stop()


def _intake_pids(server: RunningServer) -> set[int]:
    return {child.pid for child in psutil.Process(server.process.pid).children()}


def _arena_mappings(pid: int) -> list[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return [line for line in maps if "memfd:ferry-re" in line]  # request and response arenas, spills


def _body(rows: int) -> tuple[bytes, dict[str, str]]:
    x = np.ones((rows, WIDTH), np.float32)
    header = (
        b'{"inputs":[{"name":"x","shape":[%d,%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}],'
        % (
            rows,
            WIDTH,
            x.nbytes,
        )
        + b'"outputs":[{"name":"y","parameters":{"binary_data":true}}]}'
    )
    return header + x.tobytes(), {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}


async def _post(session: aiohttp.ClientSession, server: RunningServer, model: str, rows: int) -> int:
    body, headers = _body(rows)
    try:
        async with session.post(f"http://{server.http_url}/v2/models/{model}/infer", data=body, headers=headers) as r:
            await r.read()
            return r.status
    except aiohttp.ClientError:
        return 0  # its intake was killed


def _session() -> aiohttp.ClientSession:
    """Every request on a new TCP connection, so the kernel spreads them over both intakes."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True, limit=0), timeout=aiohttp.ClientTimeout(total=120)
    )


async def _kill_one_while_it_holds_requests(server: RunningServer, session: aiohttp.ClientSession) -> list:
    """Requests held in the gated model from both intakes, then SIGKILL one intake and wait for its
    replacement. Returns the held requests (the survivors' still waiting)."""
    before = metric(scrape(server), "ferry_inflight_requests")
    held = [asyncio.ensure_future(_post(session, server, GATED, 16)) for _ in range(8)]
    await wait_for_metric(server, "ferry_inflight_requests", before + 8)
    victim = min(_intake_pids(server))
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        pids = _intake_pids(server)
        if victim not in pids and len(pids) == 2 and metric(scrape(server), "ferry_intake_processes") == 2:
            return held
        assert time.monotonic() < deadline, f"no replacement for {victim}: {pids}"
        await asyncio.sleep(0.1)


async def _arenas_settle(pid: int, count: int) -> None:
    """Until the process maps ``count`` arenas (a dead intake's calls settle first)."""
    deadline = time.monotonic() + 30  # a hang guard only
    while len(_arena_mappings(pid)) != count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    mappings = _arena_mappings(pid)
    assert len(mappings) == count, "".join(mappings)


async def test_killed_intakes_leave_no_arenas_in_the_model_process(intakes) -> None:
    model_pid = intakes.process.pid
    async with _session() as session:
        for _ in range(4):  # touch the pages of every arena, in the intakes and in the model process
            assert await _post(session, intakes, "quick", ROWS) == 200
        mappings = _arena_mappings(model_pid)
        assert len(mappings) == 4, "".join(mappings)  # each intake: its request arena and our response arena
        rss_before = psutil.Process(model_pid).memory_info().rss
        held = []
        for _ in range(KILLS):
            held += await _kill_one_while_it_holds_requests(intakes, session)
            await _arenas_settle(model_pid, 4)  # the dead one's arenas went once its calls were cancelled
            for _ in range(4):
                assert await _post(session, intakes, "quick", ROWS) == 200
        assert intakes.log().count("exited with -9; starting a new one") == KILLS  # the attack happened
        async with session.post(f"http://{intakes.http_url}/v2/repository/models/{GATED}/unload") as r:
            assert r.status == 200
        await asyncio.gather(*held)
    await wait_for_metric(intakes, "ferry_inflight_requests", 0, at_most=True)
    mappings = _arena_mappings(model_pid)
    assert len(mappings) == 4, "".join(mappings)
    grown = psutil.Process(model_pid).memory_info().rss - rss_before
    assert grown < 2 * ARENA_BYTES, f"model process RSS +{grown / 2**20:.0f} MiB after {KILLS} kills"


async def test_parameters_json_cannot_carry_are_refused_and_leave_nothing_counted(intakes) -> None:
    """A request whose parameters nest deeper than the hand-off's JSON can carry gets 400 naming
    why, and the copy of its inputs in the intake's arena is freed and uncounted at once (it was
    held, counted, for as long as the intake lived: a client could fill --max-inflight-bytes with
    them). Parameters nested less deep are carried, as one process takes them."""
    x = np.ones((16, WIDTH), np.float32)

    def body(depth: int) -> tuple[bytes, dict[str, str]]:
        header = (
            b'{"parameters":{"deep":%s},"inputs":[{"name":"x","shape":[16,%d],"datatype":"FP32",'
            b'"parameters":{"binary_data_size":%d}}]}' % (b"[" * depth + b"]" * depth, WIDTH, x.nbytes)
        )
        return header + x.tobytes(), {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}

    async with _session() as session:
        for depth, status in ((300, 200), (1020, 400), (1020, 400)):
            data, headers = body(depth)
            async with session.post(
                f"http://{intakes.http_url}/v2/models/quick/infer", data=data, headers=headers
            ) as r:
                answer = await r.read()
                assert r.status == status, answer
        assert b"cannot travel between Ferry's processes as JSON" in answer
    await wait_for_metric(intakes, "ferry_inflight_bytes", 0, at_most=True)
