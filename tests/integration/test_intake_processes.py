"""Several intake processes (``--intake-processes 2``): both serve the public ports, their requests
meet in one batcher, the admission cap holds for the whole server, SIGTERM drains every process,
a dead intake process is replaced, and nothing outlives the model process.

Every situation is caused, not waited for: requests are held in model ``gated`` (preferred batch
1024, ten-minute queue delay) until it is unloaded or the server drains, and the tests read the
server's own metrics to know they are held. Each request goes over its own connection, so the
kernel spreads them over both processes (64 connections all landing on one of two processes has
odds of 2^-63).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import aiohttp
import grpc
import numpy as np
import psutil
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from ferry_client.codec import HEADER_LENGTH
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import RunningServer, free_port, start_server
from ..models import write_mlp_model
from ..server_metrics import metric, scrape, wait_for_metric

pytestmark = pytest.mark.timeout(180)

WIDTH = 64
GATED = "gated"  # holds what it is sent until unloaded or the server drains
FOURS = "fours"  # runs only full batches of 4
QUICK = "quick"
CAP = 6


def _repository(path) -> None:
    write_mlp_model(
        path / GATED,
        width=WIDTH,
        layers=1,
        max_batch_size=1024,
        extra_config="dynamic_batching { preferred_batch_size: [ 1024 ] max_queue_delay_microseconds: 600000000 }\n",
    )
    write_mlp_model(
        path / FOURS,
        width=WIDTH,
        layers=1,
        max_batch_size=4,
        extra_config="dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 600000000 }\n",
    )
    write_mlp_model(path / QUICK, width=WIDTH, layers=1, offset=1.0, extra_config="dynamic_batching { }\n")


def _start(tmp_path, *extra: str) -> RunningServer:
    repo = tmp_path / "models"
    _repository(repo)
    return start_server(
        repo,
        tmp_path / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--intake-processes",
        "2",
        "--max-inflight-requests",
        str(CAP),
        *extra,
    )


#: The shared server's hand-off arena: the tests' requests (a row of 64 floats) fit in it; a larger
#: tensor goes around it (``test_tensors_larger_than_the_shared_arena_still_go_through``).
ARENA_BYTES = 65536


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    running = _start(tmp_path_factory.mktemp("intake"), "--intake-arena-bytes", str(ARENA_BYTES))
    yield running
    running.stop()


def _intake_pids(server: RunningServer) -> set[int]:
    return {child.pid for child in psutil.Process(server.process.pid).children()}


def _body(rows: int = 1, value: float = 1.0) -> tuple[bytes, dict[str, str]]:
    x = np.full((rows, WIDTH), value, np.float32)
    header = b'{"inputs":[{"name":"x","shape":[%d,%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}' % (
        rows,
        WIDTH,
        x.nbytes,
    )
    return header + x.tobytes(), {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}


async def _post(session: aiohttp.ClientSession, server: RunningServer, model: str, value: float = 1.0):
    body, headers = _body(value=value)
    async with session.post(f"http://{server.http_url}/v2/models/{model}/infer", data=body, headers=headers) as r:
        return r.status, await r.read(), r.headers


def _fresh_connections() -> aiohttp.ClientSession:
    """Every request on a new TCP connection, so the kernel picks an intake process for each."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True, limit=0), timeout=aiohttp.ClientTimeout(total=120)
    )


async def _grpc_infer(server: RunningServer, model: str) -> grpc.StatusCode:
    """One ModelInfer on its own channel and connection (no shared subchannel)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(server.grpc_url, options=options) as channel:
        x = np.ones((1, WIDTH), np.float32)
        request = pb.ModelInferRequest(model_name=model)
        request.inputs.add(name="x", datatype="FP32", shape=[1, WIDTH])
        request.raw_input_contents.append(x.tobytes())
        try:
            await pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=120)
            return grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            return exc.code()


async def _unload_and_load(server: RunningServer, model: str) -> None:
    async with aiohttp.ClientSession() as session:
        for action in ("unload", "load"):
            async with session.post(f"http://{server.http_url}/v2/repository/models/{model}/{action}") as r:
                assert r.status == 200, await r.text()


# --- tests --------------------------------------------------------------------------------------


async def test_both_processes_serve_and_their_requests_share_one_batcher(server: RunningServer) -> None:
    assert len(_intake_pids(server)) == 2
    before = metric(scrape(server), "nv_inference_exec_count", model=FOURS, version="1")
    async with _fresh_connections() as session:
        for round_ in range(16):  # 16 rounds of 4: each batch runs only once all 4 are queued together
            results = await asyncio.gather(*(_post(session, server, FOURS, value=round_) for _ in range(4)))
            assert [status for status, _, _ in results] == [200] * 4, results[0]
            outputs = {json.loads(body)["outputs"][0]["data"][0] for _, body, _ in results}
            assert outputs == {round_}
    text = scrape(server)
    assert metric(text, "nv_inference_exec_count", model=FOURS, version="1") - before == 16
    handoffs = [metric(text, "ferry_intake_handoffs_total", row=str(row)) for row in (1, 2)]
    assert all(count > 0 for count in handoffs), handoffs
    assert metric(text, "ferry_intake_processes") == 2


def test_tritonclient_sees_one_server_over_rest_and_grpc(server: RunningServer) -> None:
    x = np.arange(WIDTH, dtype=np.float32).reshape(1, WIDTH)
    http = triton_http.InferenceServerClient(server.http_url)
    grpc_client = triton_grpc.InferenceServerClient(server.grpc_url)
    for module, client in ((triton_http, http), (triton_grpc, grpc_client)):
        assert client.is_server_ready() and client.is_model_ready(QUICK)
        inputs = [module.InferInput("x", [1, WIDTH], "FP32")]
        inputs[0].set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer(QUICK, inputs).as_numpy("y"), x + 1)
    assert http.get_model_metadata(QUICK)["inputs"][0]["shape"] == [-1, WIDTH]
    assert grpc_client.get_model_config(QUICK).config.max_batch_size == 8
    missing = triton_http.InferInput("x", [1, WIDTH], "FP32")
    missing.set_data_from_numpy(x)  # without data the request is refused (400) before any model lookup
    with pytest.raises(Exception, match="unknown model"):
        http.infer("missing", [missing])
    with pytest.raises(Exception, match="invalid model name"):  # '..' reaches the model process as sent
        http.load_model("..")
    stats = http.get_inference_statistics(QUICK)["model_stats"][0]["inference_stats"]["success"]["count"]
    assert stats >= 2


async def test_the_in_flight_cap_holds_for_the_whole_server(server: RunningServer) -> None:
    async with _fresh_connections() as session:
        held = [asyncio.ensure_future(_post(session, server, GATED)) for _ in range(CAP)]
        try:
            await wait_for_metric(server, "nv_inference_pending_request_count", CAP, model=GATED, version="1")
            assert metric(scrape(server), "ferry_inflight_requests") == CAP
            # each process alone holds fewer than CAP: only the shared count refuses these
            refused = await asyncio.gather(*(_post(session, server, QUICK) for _ in range(16)))
            assert {status for status, _, _ in refused} == {503}
            assert b"--max-inflight-requests" in refused[0][1] and refused[0][2]["Retry-After"] == "1"
            codes = await asyncio.gather(*(_grpc_infer(server, QUICK) for _ in range(8)))
            assert set(codes) == {grpc.StatusCode.UNAVAILABLE}
        finally:
            await _unload_and_load(server, GATED)  # runs what is queued at once
        results = await asyncio.gather(*held)
    assert [status for status, _, _ in results] == [200] * CAP
    await wait_for_metric(server, "ferry_inflight_requests", 0)
    async with _fresh_connections() as session:
        assert (await _post(session, server, QUICK))[0] == 200


async def test_a_dead_intake_process_is_replaced(server: RunningServer) -> None:
    victim = min(_intake_pids(server))
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = _intake_pids(server)
        if victim not in pids and len(pids) == 2 and metric(scrape(server), "ferry_intake_processes") == 2:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"no replacement intake process: {_intake_pids(server)}\n{server.log()[-3000:]}")
    assert "exited with -9; starting a new one" in server.log()
    async with _fresh_connections() as session:
        for _ in range(5):  # 30 new connections, CAP at a time: the new process gets its share
            results = await asyncio.gather(*(_post(session, server, QUICK) for _ in range(CAP)))
            assert {status for status, _, _ in results} == {200}


def _engine_libraries(pid: int) -> set[str]:
    """The ONNX Runtime libraries a process has mapped (its engine's, once a model is loaded)."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[-1] for line in maps if "onnxruntime" in line and "/" in line}


async def test_intake_processes_load_no_engine(server: RunningServer) -> None:
    """An intake hands tensors over and never runs a model: after serving requests over REST and gRPC
    none has ONNX Runtime mapped (the model process has, so the check sees one that is loaded)."""
    async with _fresh_connections() as session:
        for _ in range(3):  # 18 new connections, CAP at a time (the in-flight cap refuses more)
            results = await asyncio.gather(*(_post(session, server, QUICK) for _ in range(CAP)))
            assert {status for status, _, _ in results} == {200}
    assert set(await asyncio.gather(*(_grpc_infer(server, QUICK) for _ in range(CAP)))) == {grpc.StatusCode.OK}
    assert _engine_libraries(server.process.pid)
    loaded = {pid: _engine_libraries(pid) for pid in _intake_pids(server)}
    assert len(loaded) == 2 and not any(loaded.values()), loaded


def test_tensors_larger_than_the_shared_arena_still_go_through(server: RunningServer) -> None:
    client = triton_http.InferenceServerClient(server.http_url)
    x = np.random.default_rng(1).random((1024, WIDTH), dtype=np.float32)  # 256 KiB: 4x the arena
    assert x.nbytes == 4 * ARENA_BYTES
    inputs = [triton_http.InferInput("x", list(x.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer(GATED, inputs, timeout=None).as_numpy("y"), x)


async def test_sigterm_drains_requests_held_in_every_process(tmp_path) -> None:
    running = _start(tmp_path)
    pids = _intake_pids(running)
    async with _fresh_connections() as session:
        held = [asyncio.ensure_future(_post(session, running, GATED)) for _ in range(CAP)]
        await wait_for_metric(running, "nv_inference_pending_request_count", CAP, model=GATED, version="1")
        running.process.send_signal(signal.SIGTERM)  # draining hurries the batcher: the held requests run
        results = await asyncio.gather(*held)
    assert [status for status, _, _ in results] == [200] * CAP
    assert await asyncio.to_thread(running.process.wait, 60) == 0
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in pids)


def test_intake_processes_exit_when_the_model_process_dies(tmp_path) -> None:
    running = _start(tmp_path)
    pids = _intake_pids(running)
    running.process.kill()
    running.process.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in pids):
        for pid in pids:  # reap nothing (they are not our children): only see them gone
            if psutil.pid_exists(pid) and psutil.Process(pid).status() == "zombie":
                pids = pids - {pid}
        time.sleep(0.1)
    assert not any(psutil.pid_exists(pid) for pid in pids), "intake processes outlived the model process"


def test_a_port_in_use_is_refused_with_the_port_named(tmp_path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    repo = tmp_path / "models"
    _repository(repo)
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "ferry",
                "serve",
                str(repo),
                "--intake-processes",
                "2",
                "--http-port",
                str(port),
                "--grpc-port",
                str(free_port()),
                "--metrics-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert result.returncode == 1
    assert f"--http-port {port}: port already in use" in result.stderr


async def test_tokens_are_checked_by_the_intake_and_on_forwarded_calls(tmp_path) -> None:
    repo = tmp_path / "models"
    _repository(repo)
    headers = {"Authorization": "Bearer tok1"}
    running = start_server(
        repo,
        tmp_path / "server.log",
        "--intake-processes",
        "2",
        env={"FERRY_AUTH_TOKENS": "tok1"},
        probe_headers=headers,
    )
    try:
        body, infer_headers = _body()
        url = f"http://{running.http_url}/v2/models/{QUICK}"
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{url}/infer", data=body, headers=infer_headers) as r:
                assert r.status == 401  # refused in the intake process, before any hand-off
            async with session.get(url) as r:
                assert r.status == 401  # refused before forwarding too
            async with session.post(f"{url}/infer", data=body, headers={**infer_headers, **headers}) as r:
                assert r.status == 200
            async with session.get(url, headers=headers) as r:
                assert r.status == 200 and (await r.json())["name"] == QUICK
    finally:
        assert running.stop() == 0
