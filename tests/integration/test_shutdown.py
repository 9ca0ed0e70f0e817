"""Graceful shutdown: SIGTERM flips readiness, stops accepting, and finishes every accepted
request (in flight and queued) before exiting 0."""

from __future__ import annotations

import asyncio
import signal
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ferry_client import GrpcClient, HttpClient

from ..conftest import start_server
from ..models import write_mlp_model
from ..server_metrics import wait_for_metric

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
    # The batcher waits (ten minutes) for a batch of 32 that never comes, so the 24 requests are
    # provably accepted and queued when the signal lands; draining must run them at once.
    write_mlp_model(
        repo / "slow",
        width=WIDTH,
        layers=4,
        max_batch_size=32,
        extra_config="dynamic_batching { preferred_batch_size: [ 32 ] max_queue_delay_microseconds: 600000000 }\n",
    )
    server = start_server(repo, tmp_path / "server.log", "--exit-timeout-secs", "60")
    x = np.arange(WIDTH, dtype=np.float32)[None] / WIDTH

    def call(index: int) -> np.ndarray:
        client = (
            HttpClient(server.http_url, timeout=120) if protocol == "http" else GrpcClient(server.grpc_url, timeout=120)
        )
        with client:
            return client.infer("slow", {"x": x + index})["y"]

    try:
        with ThreadPoolExecutor(24) as pool:
            futures = [pool.submit(call, i) for i in range(24)]
            asyncio.run(wait_for_metric(server, "nv_inference_pending_request_count", 24, model="slow", version="1"))
            server.process.send_signal(signal.SIGTERM)
            seen = [_ready_status(server)]
            deadline = time.monotonic() + 60
            while seen[-1] == "200" and time.monotonic() < deadline:  # until the signal has landed
                seen.append(_ready_status(server))
            for _ in range(10):  # and it stays off
                time.sleep(0.02)
                seen.append(_ready_status(server))
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
