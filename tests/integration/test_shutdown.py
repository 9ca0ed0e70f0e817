"""Graceful shutdown: SIGTERM flips readiness, stops accepting, and finishes every accepted
request (in flight and queued) before exiting 0."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from ferry_client import FerryClientError, GrpcClient, HttpClient

from ..conftest import start_server
from ..models import write_mlp_model
from ..server_metrics import wait_for_metric

PYTHON_MODELS = Path(__file__).parent / "python_models"

WIDTH = 1024


#: A probe that got no answer in time: it says nothing of readiness (a busy machine, not the server's state).
NO_ANSWER = "no answer"


def _ready_status(server) -> str:
    try:
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=2) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except TimeoutError:
        return NO_ANSWER
    except urllib.error.URLError as exc:
        return NO_ANSWER if isinstance(exc.reason, TimeoutError) else "refused"
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
            # readiness, asked again and again from the signal until the process has exited: it goes
            # off (503) or the door closes (refused) as the signal lands, and stays so all through the drain
            seen = [_ready_status(server)]
            deadline = time.monotonic() + 60  # a hang guard only
            while server.process.poll() is None:
                assert time.monotonic() < deadline, f"still running 60 s after SIGTERM: {seen[-5:]}"
                seen.append(_ready_status(server))
                time.sleep(0.02)
            results = [f.result(timeout=120) for f in futures]
        for index, y in enumerate(results):
            np.testing.assert_allclose(y, x + index, rtol=1e-5)  # every accepted request answered, correctly
        answered = [status for status in seen if status != NO_ANSWER]
        flipped = next((i for i, status in enumerate(answered) if status != "200"), len(answered))
        assert answered[flipped:] and "200" not in answered[flipped:], seen
        assert server.process.wait(60) == 0, server.log()
        assert "ferry stopped" in server.log()
    finally:
        server.stop()


#: Longer than any drain here: a server still running then has kept waiting for work it cannot stop.
KILL_FALLBACK_S = 30


def _gated_repository(root: Path) -> tuple[Path, Path]:
    """The gated Python model alone (it holds a request whose X is -1 until ``gate/release`` exists)."""
    repo, gate = root / "models", root / "gate"
    shutil.copytree(PYTHON_MODELS / "gated", repo / "gated", ignore=shutil.ignore_patterns("__pycache__"))
    gate.mkdir()
    with open(repo / "gated" / "config.pbtxt", "a") as config:
        config.write(f'parameters {{ key: "GATE_DIR" value {{ string_value: "{gate}" }} }}\n')
    return repo, gate


@pytest.mark.parametrize(
    ("protocol", "intakes"), [("http", 1), ("grpc", 1), ("http", 2), ("grpc", 2)], ids=lambda v: str(v)
)
def test_work_past_the_exit_timeout_is_answered_503_and_abandoned(tmp_path, protocol, intakes) -> None:
    """A request still running when the exit timeout passes gets 503 / UNAVAILABLE "shutting down"
    (not uvicorn's 500 with a traceback, not grpc's CANCELLED), and the process exits without
    waiting for the model's execute(), which never returns while the gate stays shut."""
    repo, gate = _gated_repository(tmp_path)
    # 1 s: the request is held inside execute() before the signal, so the timeout's length decides
    # nothing the test sees; it is only waited out.
    server = start_server(
        repo,
        tmp_path / "server.log",
        *("--allow-python-models", "--exit-timeout-secs", "1", "--intake-processes", str(intakes)),
    )
    held = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1, 1], "data": [-1]}]}

    def call_http() -> tuple[int, str, str]:
        response = httpx.post(f"http://{server.http_url}/v2/models/gated/infer", json=held, timeout=120)
        return response.status_code, response.headers.get("content-type", ""), response.text

    def call_grpc() -> tuple[int, str, str]:
        with GrpcClient(server.grpc_url, timeout=120) as client:
            try:
                client.infer("gated", {"X": np.array([[-1]], np.int32)})
            except FerryClientError as exc:
                return 0, exc.grpc_code.name if exc.grpc_code else "", str(exc)
        return 0, "answered", ""

    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(call_http if protocol == "http" else call_grpc)
            while not (gate / "entered").exists():  # the request is inside execute(), held there
                assert not future.done(), future.result()
                time.sleep(0.01)
            server.process.send_signal(signal.SIGTERM)
            status, kind, body = future.result(timeout=KILL_FALLBACK_S)
        if protocol == "http":
            assert (status, kind) == (503, "application/json"), body
            assert "shutting down" in json.loads(body)["error"], body
        else:
            assert kind == "UNAVAILABLE", body
            assert "shutting down" in body, body
        # the answer came once the timeout had passed: the process is leaving now, not when execute() ends
        assert server.process.wait(KILL_FALLBACK_S) == 0, server.log()
        log = server.log()
        assert "Exception in ASGI application" not in log, log
        assert "abandoned" in log, log
    finally:
        (gate / "release").write_text("1")
        server.stop()
