"""Graceful shutdown: SIGTERM flips readiness, stops accepting, and finishes every accepted
request (in flight and queued) before exiting 0."""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ferry_client import GrpcClient, HttpClient

from ..conftest import start_server
from ..models import write_mlp_model

WIDTH = 1024


def _ready_status(server) -> str:
    try:
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=2) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except OSError:
        return "refused"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sigterm_finishes_every_accepted_request(tmp_path, protocol) -> None:
    repo = tmp_path / "models"
    # one instance, batches of at most 2: 24 requests take several executions, so most are queued
    write_mlp_model(repo / "slow", width=WIDTH, layers=24, max_batch_size=2, extra_config="dynamic_batching { }\n")
    server = start_server(repo, tmp_path / "server.log", "--exit-timeout-secs", "60")
    x = np.arange(WIDTH, dtype=np.float32)[None] / WIDTH
    started = threading.Barrier(25)

    def call(index: int) -> np.ndarray:
        client = (
            HttpClient(server.http_url, timeout=120) if protocol == "http" else GrpcClient(server.grpc_url, timeout=120)
        )
        with client:
            assert client.is_server_ready()
            started.wait()
            return client.infer("slow", {"x": x + index})["y"]

    try:
        with ThreadPoolExecutor(24) as pool:
            futures = [pool.submit(call, i) for i in range(24)]
            started.wait()
            time.sleep(0.3)  # the requests are now queued or running
            server.process.send_signal(signal.SIGTERM)
            seen = []
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and len(seen) < 40:
                seen.append(_ready_status(server))
                time.sleep(0.02)
            results = [f.result(timeout=120) for f in futures]
        for index, y in enumerate(results):
            np.testing.assert_allclose(y, x + index, rtol=1e-5)  # every accepted request answered, correctly
        # readiness goes off (503) or the door closes (refused) as the signal lands, and stays so
        flipped = next(i for i, status in enumerate(seen) if status != "200")
        assert "200" not in seen[flipped:], seen
        assert server.process.wait(60) == 0, server.log()
        assert "ferry stopped" in server.log()
    finally:
        server.stop()
