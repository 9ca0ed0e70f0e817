"""Protocol details Triton's own clients rely on, checked with the official tritonclient:
health bodies, response compression, stream final responses and Triton's error wording."""

from __future__ import annotations

import gzip
import queue
import shutil
import zlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from ..conftest import MODEL_REPO, RunningServer, start_server
from .triton_helpers import Triton, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def simple_arrays() -> dict[str, np.ndarray]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    return {"INPUT0": a, "INPUT1": np.full((1, 16), 2, dtype=np.int32)}


# --- health bodies (KServe spec) ------------------------------------------------------------


def test_health_answers_carry_kserve_json_bodies(server: RunningServer) -> None:
    base = f"http://{server.http_url}"
    assert httpx.get(f"{base}/v2/health/live").json() == {"live": True}
    assert httpx.get(f"{base}/v2/health/ready").json() == {"ready": True}
    assert httpx.get(f"{base}/v2/models/simple/ready").json() == {"name": "simple", "ready": True}
    missing = httpx.get(f"{base}/v2/models/no_such_model/ready")
    assert missing.status_code == 503 and missing.json() == {"name": "no_such_model", "ready": False}
    client = thttp.InferenceServerClient(server.http_url)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("simple")


# --- compression ------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_tritonclient_response_and_request_compression(server: RunningServer, algorithm: str) -> None:
    triton = connect("http", server)
    arrays = simple_arrays()
    result = triton.client.infer(
        "simple",
        triton.inputs(arrays),
        response_compression_algorithm=algorithm,
        request_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_tritonclient_grpc_compression(server: RunningServer, algorithm: str) -> None:
    triton = connect("grpc", server)
    arrays = simple_arrays()
    result = triton.client.infer("simple", triton.inputs(arrays), compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), arrays["INPUT0"] - arrays["INPUT1"])


def test_accept_encoding_is_honoured_and_not_forced(server: RunningServer) -> None:
    url = f"http://{server.http_url}/v2/models/simple/infer"
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
    with httpx.Client() as client:  # raw bytes: httpx must not decode for us
        for encoding, undo in (("gzip", gzip.decompress), ("deflate", zlib.decompress)):
            with client.stream("POST", url, json=body, headers={"Accept-Encoding": encoding}) as response:
                raw = b"".join(response.iter_raw())
            assert response.headers["content-encoding"] == encoding
            assert b'"OUTPUT0"' in undo(raw)
        with client.stream("POST", url, json=body, headers={"Accept-Encoding": "identity"}) as response:
            raw = b"".join(response.iter_raw())
        assert "content-encoding" not in response.headers and b'"OUTPUT0"' in raw
        with client.stream("POST", url, json=body, headers={"Accept-Encoding": "gzip;q=0, deflate"}) as response:
            assert response.headers["content-encoding"] == "deflate"


# --- gRPC stream final responses --------------------------------------------------------------


def _stream(server: RunningServer, empty_final: bool, count: int) -> list:
    """Send one streamed request; collect ``count`` callbacks (each a result or an error)."""
    answers: queue.Queue = queue.Queue()
    client = tgrpc.InferenceServerClient(server.grpc_url)
    triton = Triton("grpc", tgrpc, client)
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    try:
        client.async_stream_infer(
            "simple", triton.inputs(simple_arrays()), request_id="r1", enable_empty_final_response=empty_final
        )
        return [answers.get(timeout=30) for _ in range(count)]
    finally:
        client.stop_stream()
        client.close()


def _final(result) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def test_stream_response_is_flagged_final(server: RunningServer) -> None:
    ((result, error),) = _stream(server, empty_final=False, count=1)
    assert error is None and _final(result)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), simple_arrays()["INPUT0"] - 2)


def test_stream_sends_empty_final_response_when_asked(server: RunningServer) -> None:
    (data, error), (final, final_error) = _stream(server, empty_final=True, count=2)
    assert error is None and final_error is None
    assert not _final(data)
    np.testing.assert_array_equal(data.as_numpy("OUTPUT0"), simple_arrays()["INPUT0"] + 2)
    assert _final(final)
    response = final.get_response()
    assert list(response.outputs) == [] and response.id == "r1" and response.model_name == "simple"


# --- Triton's error wording, and no server paths in any message --------------------------------


@pytest.fixture(scope="module")
def broken_repo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A repository with a good model and one whose config Ferry must refuse (sequence batching)."""
    repo = tmp_path_factory.mktemp("broken") / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    shutil.copytree(MODEL_REPO / "simple", repo / "stateful")
    config = (repo / "stateful" / "config.pbtxt").read_text().replace('name: "simple"', 'name: "stateful"')
    (repo / "stateful" / "config.pbtxt").write_text(
        config + "sequence_batching { max_sequence_idle_microseconds: 5 }\n"
    )
    running = start_server(repo, repo.parent / "server.log", "--model-control-mode", "explicit", "--load-model", "*")
    yield running
    running.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_error_wording_without_paths(broken_repo_server: RunningServer, protocol: str) -> None:
    server = broken_repo_server
    triton = connect(protocol, server)
    messages = [
        triton.expect_error(
            "not_found", "Request for unknown model: 'nope' is not found", triton.infer, "nope", simple_arrays()
        ),
        triton.expect_error(
            "not_found",
            "Request for unknown model: 'simple' version 4 is not found",
            triton.infer,
            "simple",
            simple_arrays(),
            model_version="4",
        ),
        triton.expect_error(
            "unavailable",
            "Request for unknown model: 'stateful' has no available versions",
            triton.infer,
            "stateful",
            simple_arrays(),
        ),
        triton.expect_error("invalid", "failed to load 'stateful'", triton.client.load_model, "stateful"),
    ]
    assert "sequence batching (stateful models) is not supported for stateful" in messages[-1]
    rows = httpx.post(f"http://{server.http_url}/v2/repository/index", json={}).json()
    reasons = [row.get("reason", "") for row in rows]
    assert any("sequence_batching" in reason for reason in reasons), rows
    for text in [*messages, *reasons]:
        assert str(server.repository) not in text and str(Path(server.repository).resolve()) not in text, text
        assert "/config.pbtxt" not in text or text.count("stateful/config.pbtxt") == text.count("/config.pbtxt")


def test_stream_error_for_unknown_model_uses_triton_wording(server: RunningServer) -> None:
    answers: queue.Queue = queue.Queue()
    client = tgrpc.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    try:
        inputs = Triton("grpc", tgrpc, client).inputs(simple_arrays())
        client.async_stream_infer("nope", inputs)
        result, error = answers.get(timeout=30)
    finally:
        client.stop_stream()
        client.close()
    assert result is None and isinstance(error, InferenceServerException)
    assert "Request for unknown model: 'nope' is not found" in error.message()
