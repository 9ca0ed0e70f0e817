"""Graceful shutdown: SIGTERM flips readiness, stops accepting, and finishes every accepted
request (in flight and queued) before exiting 0."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from ferry_client import FerryClientError, GrpcClient, HttpClient
from ferry_client.protocol import grpc_service_pb2 as pb

from ..conftest import start_server
from ..models import write_mlp_model, write_repeat_model
from ..raw_grpc_peer import RawPeer
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


class SlowReader(RawPeer):
    """A client on a small receive buffer that reads what comes a little at a time, granting window
    as it reads, as grpc's clients do: the end of a large answer is still in the server's socket,
    unsent, when grpc has written it, and the client's window updates come in meanwhile."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        assert self.transport is not None
        self.transport.pause_reading()
        asyncio.get_running_loop().call_later(0.002, self._resume)

    def _resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


@pytest.mark.parametrize("intakes", [1, 2])
def test_a_slow_reader_gets_its_whole_answer_across_the_shutdown(tmp_path, intakes: int) -> None:
    """grpc closes a connection once its last call is over after shutdown has begun, and closing a
    socket with client frames unread resets the connection, dropping answer bytes still unsent:
    one of 24 accepted gRPC calls was lost so ("Connection reset by peer"), and here the last
    16 KB of the answer, every run. Now grpc's shutdown begins once every unary call accepted
    before the signal has its answer written, and grpc closes only after the client has
    acknowledged the GOAWAY's ping, which comes after the answer. The call here is held by its
    batcher until SIGTERM; its answer is 1 MiB, read slowly: the client has every byte and the
    call's OK status. Each process counted exactly the calls it had to answer: calls over before
    (answered, failed) are not among them. One process, and two intakes."""
    repo = tmp_path / "models"
    width, times = 1024, 256
    held = "dynamic_batching { preferred_batch_size: [ 32 ] max_queue_delay_microseconds: 600000000 }\n"
    write_repeat_model(repo / "repeat", width=width, times=times, extra_config=held)
    server = start_server(
        repo, tmp_path / "server.log", "--exit-timeout-secs", "60", "--intake-processes", str(intakes)
    )
    x = np.arange(width, dtype=np.float32)[None]
    request = pb.ModelInferRequest(model_name="repeat")
    request.inputs.add(name="x", datatype="FP32", shape=[1, width])
    request.raw_input_contents.append(x.tobytes())

    with GrpcClient(server.grpc_url) as client:  # calls over before the held one: one answered, one failed
        assert client.is_server_live()
        with pytest.raises(FerryClientError):
            client.model_metadata("missing")

    async def run() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.connect(("127.0.0.1", server.grpc_port))
        sock.setblocking(False)
        message = request.SerializeToString()
        _, peer = await asyncio.get_running_loop().create_connection(
            lambda: SlowReader(message, reads_others=True), sock=sock
        )
        peer.call(1, "ModelInfer", 1)
        await wait_for_metric(server, "nv_inference_pending_request_count", 1, model="repeat", version="1")
        since = len(server.log())
        server.process.send_signal(signal.SIGTERM)
        await server.said("accepted call(s) to answer before GOAWAY", intakes, since)  # every listening process
        # each process counted its calls exactly: only the held one is still to be answered
        counts = re.findall(r"gRPC: (-?\d+) accepted call\(s\) to answer before GOAWAY", server.log()[since:])
        assert sorted(counts) == (["0", "1"] if intakes == 2 else ["1"]), counts
        await peer.until(lambda: 1 in peer.trailers, timeout=60)
        assert peer.trailers[1].get("grpc-status") == "0", peer.trailers[1]
        (answer,) = peer.messages(1)
        y = np.frombuffer(pb.ModelInferResponse.FromString(answer).raw_output_contents[0], np.float32)
        np.testing.assert_array_equal(y, np.tile(x, (1, times))[0])

    try:
        asyncio.run(run())
        assert server.process.wait(60) == 0, server.log()
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


def test_grpc_calls_that_come_while_accepted_ones_are_answered_are_served(tmp_path) -> None:
    """Between SIGTERM and GOAWAY (grpc's shutdown waits for the answers of the calls accepted
    before the signal) a new call is served, not refused: it is GOAWAY that moves a client's next
    calls elsewhere, and until it is sent a refusal would be an error the client sees. The accepted
    call is held in the gated model until the new one has been answered."""
    repo, gate = _gated_repository(tmp_path)
    write_mlp_model(repo / "quick", width=16, layers=1)
    server = start_server(
        repo,
        tmp_path / "server.log",
        *("--allow-python-models", "--exit-timeout-secs", "60", "--intake-processes", "1"),
    )

    def held() -> np.ndarray:
        with GrpcClient(server.grpc_url, timeout=120) as client:
            return client.infer("gated", {"X": np.array([[-1]], np.int32)})["BATCH"]

    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(held)
            while not (gate / "entered").exists():  # the call is inside execute(), held there
                assert not future.done(), future.result()
                time.sleep(0.01)
            since = len(server.log())
            server.process.send_signal(signal.SIGTERM)
            asyncio.run(server.said("gRPC: 1 accepted call(s) to answer before GOAWAY", 1, since))
            with GrpcClient(server.grpc_url, timeout=60) as client:
                assert client.infer("quick", {"x": np.ones((1, 16), np.float32)})["y"].shape == (1, 16)
            (gate / "release").write_text("1")
            assert future.result(timeout=60).tolist() == [[1]]
        assert server.process.wait(60) == 0, server.log()
    finally:
        (gate / "release").write_text("1")
        server.stop()


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
