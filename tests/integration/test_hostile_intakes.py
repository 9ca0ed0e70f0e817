"""Attacks on the intake processes (issue 24): an intake killed again and again must leave nothing
behind in the model process, neither its arenas' mappings nor their resident pages.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import psutil
import pytest
import tritonclient.http as triton_http

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model
from ..server_metrics import metric, scrape

pytestmark = pytest.mark.timeout(180)

WIDTH = 1024
ARENA_BYTES = 16 * 2**20
KILLS = 6


@pytest.fixture(scope="module")
def intakes(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_intakes") / "models"
    write_mlp_model(repo / "quick", width=WIDTH, layers=1, max_batch_size=4096)
    running = start_server(
        repo,
        repo.parent / "server.log",
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
        return [line for line in maps if "memfd:ferry" in line]


def _fill_arenas(server: RunningServer) -> None:
    """Requests and answers of 12 MiB over fresh connections (so both intakes get some): the pages
    of every arena are touched, in the intakes and in the model process."""
    x = np.ones((3072, WIDTH), np.float32)
    for _ in range(4):
        client = triton_http.InferenceServerClient(server.http_url, network_timeout=60)
        inputs = [triton_http.InferInput("x", list(x.shape), "FP32")]
        inputs[0].set_data_from_numpy(x, binary_data=True)
        outputs = [triton_http.InferRequestedOutput("y", binary_data=True)]
        assert client.infer("quick", inputs, outputs=outputs).as_numpy("y").shape == x.shape
        client.close()


def _kill_one_and_wait_for_its_replacement(server: RunningServer) -> None:
    victim = min(_intake_pids(server))
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        pids = _intake_pids(server)
        if victim not in pids and len(pids) == 2 and metric(scrape(server), "ferry_intake_processes") == 2:
            return
        assert time.monotonic() < deadline, f"no replacement for {victim}: {pids}"
        time.sleep(0.1)


def test_killed_intakes_leave_no_arenas_in_the_model_process(intakes) -> None:
    model_pid = intakes.process.pid
    _fill_arenas(intakes)
    mappings = len(_arena_mappings(model_pid))
    assert mappings == 4, "".join(_arena_mappings(model_pid))  # each live intake: its request arena (read-only here) and our response arena
    rss_before = psutil.Process(model_pid).memory_info().rss
    for _ in range(KILLS):
        _kill_one_and_wait_for_its_replacement(intakes)
        _fill_arenas(intakes)
    assert intakes.log().count("exited with -9; starting a new one") == KILLS  # the attack happened
    deadline = time.monotonic() + 10  # a dead intake's calls settle before its arenas go
    while len(_arena_mappings(model_pid)) > mappings and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_arena_mappings(model_pid)) == mappings, "".join(_arena_mappings(model_pid))
    grown = psutil.Process(model_pid).memory_info().rss - rss_before
    assert grown < 2 * ARENA_BYTES, f"model process RSS +{grown / 2**20:.0f} MiB after {KILLS} kills"
