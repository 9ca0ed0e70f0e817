"""Hostile use of decoupled models against a real server: a stream that never reads, a thousand
requests that stay open (a model that never sends its final response), and SIGTERM while a stream
is open. Memory stays bounded, other clients are served, the in-flight cap applies, and shutdown
ends open streams with an error after the drain time."""

from __future__ import annotations

import queue
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import grpc
import httpx
import numpy as np
import psutil
import pytest
import tritonclient.grpc as tgrpc

from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import RunningServer, start_server
from .test_decoupled import MODELS, build_repository

CAP = 1100


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("decoupled_hostile"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RunningServer]:
    running = start_server(
        repository,
        repository.parent / "server.log",
        "--allow-python-models",
        "--max-inflight-requests",
        str(CAP),
        # one stream holds 1000 open requests here: the in-flight cap is what is under test
        *("--grpc-max-stream-requests", str(CAP), "--max-streamed-requests-per-peer", str(CAP)),
        *("--max-streamed-requests", str(CAP)),
    )
    yield running
    running.stop()


def _metric(server: RunningServer, pattern: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    match = re.search("^" + pattern + r" (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def _simple_served(server: RunningServer) -> bool:
    a = list(range(16))
    body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": a} for n in ("INPUT0", "INPUT1")]}
    response = httpx.post(f"http://{server.http_url}/v2/models/simple/infer", json=body, timeout=10)
    return response.status_code == 200 and response.json()["outputs"][0]["data"] == [2 * x for x in a]


def _raw_request(model: str, inputs: dict[str, np.ndarray], datatypes: dict[str, str]) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id="hostile")
    for name, array in inputs.items():
        request.inputs.add(name=name, datatype=datatypes[name], shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    return request


#: More responses than the stream's buffers and gRPC's flow-control window can hold unread.
HELD_AT_MOST = 400
REPEAT_SENT = r'ferry_test_repeat_sent\{model="repeat"\}'
REPEAT_SENDING = r'ferry_test_repeat_sending\{model="repeat"\}'  # producers inside send()
REPEAT_CANCELLED = r'ferry_test_repeat_cancelled\{model="repeat"\}'  # requests stopped for is_cancelled()


def _until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait for a state of the server; the timeout only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _held_back(server: RunningServer, start: float) -> float:
    """Responses sent once repeat's producer sits in a ``send()`` that does not return (two scrapes
    in a row find it there with nothing sent in between, after its first response: the first
    ``send()`` of a busy machine can take that long), or as soon as it has sent more than
    ``HELD_AT_MOST`` (it is not held back)."""
    deadline = time.monotonic() + 60  # a hang guard only
    last = -1.0
    while True:
        sent, sending = _metric(server, REPEAT_SENT) - start, _metric(server, REPEAT_SENDING)
        if sent > HELD_AT_MOST or (0 < sent == last and sending == 1):
            return sent
        assert time.monotonic() < deadline, f"repeat sent {sent} responses, {sending} sending"
        last = sent
        time.sleep(0.05)


def test_a_stream_that_never_reads_holds_the_model_back(server: RunningServer) -> None:
    """repeat would send 100000 responses of 256 KiB (25 GB); the client reads none. The model's
    sends wait once the bounded buffers fill (its producer stays inside ``send()``), the server's
    memory stays put, others are served, and cancelling the call lets the model's thread see
    is_cancelled() and stop."""
    process = psutil.Process(server.process.pid)
    before = process.memory_info().rss
    start = _metric(server, REPEAT_SENT)
    stopped = _metric(server, REPEAT_CANCELLED)
    release = threading.Event()
    request = _raw_request(
        "repeat",
        {"IN": np.ones(65536, dtype=np.float32), "COUNT": np.array([100000], dtype=np.int32)},
        {"IN": "FP32", "COUNT": "INT32"},
    )

    def requests() -> Iterator[pb.ModelInferRequest]:
        yield request
        release.wait(60)  # keep the request side open; never read the responses

    channel = grpc.insecure_channel(server.grpc_url)
    call = pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
    try:
        held = _held_back(server, start)
        assert held <= HELD_AT_MOST, held  # bounded by the stream buffers and gRPC's flow-control window
        assert process.memory_info().rss - before < 300 * 2**20
        assert _simple_served(server)
        assert _metric(server, REPEAT_SENT) - start <= HELD_AT_MOST  # still held back after that
    finally:
        call.cancel()
        release.set()
        channel.close()
    _until(lambda: _metric(server, REPEAT_CANCELLED) > stopped, "the model never saw is_cancelled()")
    assert _metric(server, REPEAT_SENT) - start <= HELD_AT_MOST + 1  # the send the cancel woke, then none
    _until(
        lambda: _metric(server, "ferry_inflight_requests") == 0, "the cancelled stream still holds its admission slot"
    )


def test_a_thousand_open_requests_are_capped_and_others_are_served(server: RunningServer) -> None:
    client = tgrpc.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), results))
    process = psutil.Process(server.process.pid)
    before = process.memory_info().rss
    try:
        tensor = tgrpc.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([9], dtype=np.int32))
        for index in range(1000):
            client.async_stream_infer("never_final", [tensor], request_id=str(index))
        answers = [results.get(timeout=60) for _ in range(1000)]
        assert all(error is None for _, error in answers)
        assert _metric(server, "ferry_inflight_requests") == 1000  # none of them ever ends
        assert _simple_served(server)
        assert process.memory_info().rss - before < 200 * 2**20
        for index in range(150):  # past the cap: refused at once, the stream goes on
            client.async_stream_infer("never_final", [tensor], request_id=f"more{index}")
        more = [results.get(timeout=60) for _ in range(150)]
        refused = [error for _, error in more if error is not None]
        assert len(refused) == 150 - (CAP - 1000)
        assert all("server overloaded" in error.message() for error in refused)
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    _until(lambda: _metric(server, "ferry_inflight_requests") == 0, "closing the stream did not end them all")
    assert _simple_served(server)


def test_sigterm_ends_open_streams_with_an_error_after_the_drain_time(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "never_final", repo / "never_final", ignore=shutil.ignore_patterns("__pycache__"))
    server = start_server(repo, tmp_path / "server.log", "--allow-python-models", "--exit-timeout-secs", "2")
    client = tgrpc.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), results))
    try:
        tensor = tgrpc.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([4], dtype=np.int32))
        client.async_stream_infer("never_final", [tensor], request_id="open")
        result, error = results.get(timeout=30)
        assert error is None and int(result.as_numpy("OUT")[0]) == 4
        server.process.send_signal(signal.SIGTERM)
        _, error = results.get(timeout=30)
        assert error is not None
        assert "the server is shutting down: the stream ended before its final response" in error.message()
        assert server.process.wait(timeout=30) == 0
        assert "ended 1 decoupled request(s) still open after 2s with an error" in server.log()  # it waited first
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
        server.stop()
