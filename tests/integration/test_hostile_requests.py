"""Hostile requests (issue 15): work that costs far more than it looks. Each test checks the clean
error the caller gets, that the cost was counted or refused before it was paid, and (where the
attack runs concurrently) that another client is still served meanwhile. No assertion times anything:
that a body inflates off the event loop is shown with a held pool in tests/unit/test_http_inflate.py."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import shutil
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from PIL import Image

from ferry_client import GrpcClient, HttpClient
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import MODEL_REPO, ROOT, RunningServer, start_server
from ..models import write_mlp_model
from ..server_metrics import metric, scrape, wait_for_metric

MAX_RESPONSE = 8 * 2**20
MAX_BODY = 64 * 2**20
GATED_WIDTH = 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_requests") / "models"
    for name in ("dynamic_shape", "digit_detector", "simple"):
        shutil.copytree(MODEL_REPO / name, repo / name)
    write_mlp_model(  # holds what it is sent until unloaded (see test_overload)
        repo / "gated",
        width=GATED_WIDTH,
        layers=1,
        max_batch_size=1024,
        extra_config="dynamic_batching { preferred_batch_size: [ 1024 ] max_queue_delay_microseconds: 600000000 }\n",
    )
    running = start_server(
        repo,
        repo.parent / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--max-response-bytes",
        str(MAX_RESPONSE),
        "--http-max-body-bytes",
        str(MAX_BODY),
    )
    yield running
    running.stop()


def _post(server: RunningServer, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _live(server: RunningServer) -> int:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/health/live", timeout=60) as response:
        return response.status


def _png(size: tuple[int, int] = (1, 1)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (128, 64, 32)).save(out, format="PNG")
    return out.getvalue()


def test_image_count_is_checked_before_any_image_is_decoded(server) -> None:
    """8,000 tiny PNGs as BYTES to a detector with max_batch_size 16: 400 at once, nothing decoded."""
    labels = {"model": "digit_detector", "version": "1"}
    decoded_before = metric(scrape(server), "ferry_image_count", **labels)
    images = np.array([_png()] * 8000, dtype=object)
    started = time.monotonic()
    with GrpcClient(server.grpc_url) as client, pytest.raises(Exception) as refused:
        client.infer("digit_detector", {"images": images})
    elapsed = time.monotonic() - started
    assert getattr(refused.value, "grpc_code", None) == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert "8000 images exceed the max_batch_size 16 of model 'digit_detector'" in str(refused.value)
    assert metric(scrape(server), "ferry_image_count", **labels) == decoded_before
    print(f"8000-image request refused in {elapsed * 1000:.0f} ms")


def test_small_gzip_body_asking_for_a_huge_json_response_is_refused(server) -> None:
    """A ~16 KB gzip body whose [1, 4M] FP32 answer as JSON would be tens of MB: 413 before it is built."""
    n = 4 * 2**20
    header = {"inputs": [{"name": "x", "shape": [1, n], "datatype": "FP32", "parameters": {"binary_data_size": 4 * n}}]}
    head = json.dumps(header).encode()
    body = gzip.compress(head + bytes(4 * n), compresslevel=9)
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Encoding": "gzip",
        "Inference-Header-Content-Length": str(len(head)),
    }
    status, text = _post(server, "/v2/models/dynamic_shape/infer", body, headers)
    assert status == 413, (status, text[:200])
    assert f"more than the limit of {MAX_RESPONSE} bytes (--max-response-bytes)" in text
    assert "binary_data" in text
    with HttpClient(server.http_url) as client:  # the same answer in binary is 16 MB: still over the cap
        with pytest.raises(Exception, match="--max-response-bytes"):
            client.infer("dynamic_shape", {"x": np.zeros((1, n), np.float32)})
        small = client.infer("dynamic_shape", {"x": np.ones((1, 4), np.float32)})["y"]
    assert small.tolist() == [[3.0] * 4]


def test_concurrent_gzip_bombs_are_refused_and_others_are_served(server) -> None:
    """Six bodies of 256 KB that inflate to 256 MiB, at once: 413 each (inflating stops at the body
    limit), while health checks sent with them are answered; then nothing is held, and the next
    request is served."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(2**20)
    bomb = b"".join(compressor.compress(chunk) for _ in range(256)) + compressor.flush()
    assert len(bomb) < 300_000
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}

    async def run() -> tuple[list[tuple[int, str]], list[int]]:
        bombs = [asyncio.to_thread(_post, server, "/v2/models/simple/infer", bomb, headers) for _ in range(6)]
        lives = [asyncio.to_thread(_live, server) for _ in range(12)]
        results = await asyncio.gather(*bombs, *lives)
        await wait_for_metric(server, "ferry_inflight_bytes", 0, at_most=True)
        return results[:6], results[6:]

    results, lives = asyncio.run(run())
    for status, text in results:
        assert status == 413, (status, text[:200])
        assert f"decompressed request body exceeds the limit of {MAX_BODY} bytes" in text
    assert lives == [200] * 12
    with HttpClient(server.http_url) as client:
        ones = np.ones((1, 16), np.int32)
        answer = client.infer("simple", {"INPUT0": ones, "INPUT1": ones})
    assert answer["OUTPUT0"].tolist() == (2 * ones).tolist()


def test_typed_grpc_contents_are_counted_by_admission(server) -> None:
    """A request sent as fp32_contents (not raw) holds its message and its decoded array: the
    in-flight byte count says so while the request is held in the gated model's queue."""
    rows = 1000
    request = pb.ModelInferRequest(model_name="gated")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[rows, GATED_WIDTH])
    tensor.contents.fp32_contents.extend(np.ones(rows * GATED_WIDTH, np.float32).tolist())
    typed_bytes = rows * GATED_WIDTH * 4

    async def run() -> pb.ModelInferResponse:
        async with grpc.aio.insecure_channel(server.grpc_url, options=[("grpc.max_send_message_length", -1)]) as ch:
            call = pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(request)
            await wait_for_metric(server, "nv_inference_pending_request_count", 1, model="gated", version="1")
            held = metric(await asyncio.to_thread(scrape, server), "ferry_inflight_bytes")
            assert held >= 2 * typed_bytes, held  # the message and the array decoded from it
            _repository(server, "unload")  # runs what the gated model holds
            response = await call
        _repository(server, "load")
        return response

    response = asyncio.run(run())
    assert response.outputs[0].shape == [rows, GATED_WIDTH]


def _repository(server: RunningServer, action: str) -> None:
    status, text = _post(server, f"/v2/repository/models/gated/{action}", b"", {})
    assert status == 200, text


def test_overlong_model_names_and_negative_classification_are_invalid_arguments(server) -> None:
    name = "m" * 300
    for action in ("load", "unload"):
        status, text = _post(server, f"/v2/repository/models/{name}/{action}", b"", {})
        assert status == 400, (action, status, text)
        assert "at most 255 bytes" in text
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=name))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        request = pb.ModelInferRequest(model_name="dynamic_shape")
        tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        tensor.contents.fp32_contents.extend([1.0] * 4)
        request.outputs.add(name="y").parameters["classification"].int64_param = -5
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "classification must be a non-negative integer" in refused.value.details()


def test_huge_priority_levels_are_refused_at_load_with_the_field_named(server) -> None:
    config = {
        "max_batch_size": 8,
        "dynamic_batching": {"priority_levels": "18446744073709551615", "default_priority_level": "1"},
    }
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    status, text = _post(server, "/v2/repository/models/simple/load", body, {"Content-Type": "application/json"})
    assert status == 400, (status, text)
    assert "'dynamic_batching.priority_levels' must be within 0..1024, got 18446744073709551615" in text
    with HttpClient(server.http_url) as client:  # the loaded version keeps serving
        assert client.is_model_ready("simple")


def test_an_override_asking_for_100000_instances_is_refused_naming_the_range(server) -> None:
    """Issue 38 item 6: the load API's ``config`` override is checked as a config file is; this one
    kept a load building instances (+3 GB) and later loads queued behind it."""
    config = {"max_batch_size": 8, "instance_group": [{"count": 100000, "kind": "KIND_CPU"}]}
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    status, text = _post(server, "/v2/repository/models/simple/load", body, {"Content-Type": "application/json"})
    assert status == 400, (status, text)
    assert "'instance_group.count' must be within 0..64, got 100000" in text
    status, text = _post(server, "/v2/repository/models/simple/load", b"{}", {"Content-Type": "application/json"})
    assert status == 200, (status, text)  # the next load is not queued behind it
    with HttpClient(server.http_url) as client:
        assert client.is_model_ready("simple")


def test_aborted_uploads_log_one_short_line_each(server) -> None:
    """Clients that hang up mid-body: no tracebacks, one line per upload."""
    uploads = 50
    head = (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n" + b"{" * 1000
    )
    marker = "the client disconnected before sending the whole body"
    before = server.log().count(marker)

    async def run() -> None:
        for _ in range(uploads):
            _, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
            writer.write(head)
            await writer.drain()
            writer.close()
        deadline = time.monotonic() + 60
        while server.log().count(marker) < before + uploads:  # every abort has been handled
            assert time.monotonic() < deadline, server.log()[-2000:]
            await asyncio.sleep(0.05)

    asyncio.run(run())
    log = server.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 500 :][:3000]
    lines = [line for line in log.splitlines() if marker in line]
    assert all(len(line) < 200 for line in lines), lines[:2]


def test_shared_memory_is_off_unless_the_operator_allows_it(server) -> None:
    """A server started without --allow-shared-memory answers as Triton 2.73 with client shared
    memory off (issue 42 item 5): status ``[]``, register and unregister (system and CUDA) 501 /
    UNIMPLEMENTED "Client shared memory is disabled" (a code clients do not retry), naming the flag;
    a request naming a region gets the same; the object is never opened."""
    disabled, flag = "Client shared memory is disabled", "--allow-shared-memory"
    for kind in ("system", "cuda"):
        with urllib.request.urlopen(f"http://{server.http_url}/v2/{kind}sharedmemory/status", timeout=30) as answer:
            assert (answer.status, json.loads(answer.read())) == (200, [])
        body = json.dumps({"key": "/anything", "offset": 0, "byte_size": 64, "device_id": 0}).encode()
        for path in ("region/r/register", "region/r/unregister", "unregister"):
            status, text = _post(server, f"/v2/{kind}sharedmemory/{path}", body, {"Content-Type": "application/json"})
            assert status == 501 and disabled in text and flag in text, (kind, path, status, text)
    shm = {"shared_memory_region": "r", "shared_memory_byte_size": 64}
    infer = {
        "inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "parameters": shm} for n in ("INPUT0", "INPUT1")]
    }
    status, text = _post(server, "/v2/models/simple/infer", json.dumps(infer).encode(), {})
    assert status == 501 and disabled in text, (status, text)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert not stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(), timeout=30).regions
        assert not stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(), timeout=30).regions
        for method, request in (
            ("SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(name="r", key="/x", byte_size=64)),
            ("SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest()),
            ("CudaSharedMemoryRegister", pb.CudaSharedMemoryRegisterRequest(name="r", byte_size=64)),
            ("CudaSharedMemoryUnregister", pb.CudaSharedMemoryUnregisterRequest(name="r")),
        ):
            with pytest.raises(grpc.RpcError) as info:
                getattr(stub, method)(request, timeout=30)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED, method
            assert disabled in info.value.details() and flag in info.value.details(), method
        extensions = stub.ServerMetadata(pb.ServerMetadataRequest()).extensions
    assert "system_shared_memory" not in extensions


def test_child_processes_never_import_from_the_working_directory(tmp_path) -> None:
    """Started (by its console script) from a directory holding a hostile ``ferry/`` package, the
    server's intake processes and isolated Python models import the installed package: the planted
    code never runs (``python -m`` alone would have put that directory first on sys.path)."""
    marker = tmp_path / "planted-code-ran"
    hostile = tmp_path / "cwd" / "ferry"
    hostile.mkdir(parents=True)
    (hostile / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit(3)\n")
    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    shutil.copytree(ROOT / "tests" / "integration" / "python_models" / "add_sub", repo / "add_sub")
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text() + 'parameters { key: "FERRY_ISOLATION" value { string_value: "process" } }\n')
    launcher = [str(Path(sys.executable).with_name("ferry"))]
    running = start_server(
        repo,
        tmp_path / "server.log",
        *("--intake-processes", "2", "--allow-python-models"),
        cwd=hostile.parent,
        launcher=launcher,
    )
    try:
        with HttpClient(running.http_url) as client:  # served by an intake process, run by a child
            ones = np.ones((1, 4), np.float32)
            assert client.infer("add_sub", {"INPUT0": ones, "INPUT1": ones})["OUTPUT0"].tolist() == [[2.0] * 4]
            assert client.infer("simple", {"INPUT0": np.ones((1, 16), np.int32), "INPUT1": np.ones((1, 16), np.int32)})
        assert "intake processes" in running.log() or "2 intake" in running.log()
    finally:
        running.stop()
    assert not marker.exists(), running.log()[-3000:]
