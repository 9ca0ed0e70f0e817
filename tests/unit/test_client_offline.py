"""Client tests that need no Ferry server.

HTTP clients talk to an ``httpx.MockTransport`` so the exact bytes they send can be inspected and
any response (including malformed ones) can be fed back; gRPC clients talk to a small in-process
fake servicer. Together they pin the wire format, error mapping and retry policy.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

import ferry_client
import ferry_client.grpc as ferry_grpc
import ferry_client.http as ferry_http
from ferry_client import (
    AsyncGrpcClient,
    AsyncHttpClient,
    DeadlineExceededError,
    FerryClientError,
    GrpcClient,
    HttpClient,
    InferResult,
    InvalidArgumentError,
    NotFoundError,
    ServerError,
    UnauthenticatedError,
    UnavailableError,
)
from ferry_client.codec import HEADER_LENGTH, bf16_to_float32, float32_to_bf16, join_body, write_tensor
from ferry_client.errors import error_from_grpc_code, error_from_http_status
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

# --- helpers ---------------------------------------------------------------------------------------


class Recorder:
    """A MockTransport handler that records requests and answers from a script of responses."""

    def __init__(self, *responses: httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        answer = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(request)
        return answer

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]


def http_client(recorder: Recorder, **kwargs: Any) -> HttpClient:
    return HttpClient("127.0.0.1:8000", transport=httpx.MockTransport(recorder), **kwargs)


def split_request(request: httpx.Request) -> tuple[dict[str, Any], bytes]:
    """The JSON header and binary tail of a request the client sent."""
    body = request.content
    length = request.headers.get(HEADER_LENGTH)
    if length is None:
        return json.loads(body), b""
    return json.loads(body[: int(length)]), body[int(length) :]


def infer_response(outputs: dict[str, tuple[np.ndarray, str, bool]], **header: Any) -> httpx.Response:
    """A V2 response as a server would build it: JSON, plus binary outputs when any are binary."""
    blobs: list[bytes | memoryview] = []
    entries = [
        write_tensor(name, array, datatype, binary, blobs) for name, (array, datatype, binary) in outputs.items()
    ]
    body, header_length = join_body({"model_name": "m", "model_version": "1", **header, "outputs": entries}, blobs)
    headers = {HEADER_LENGTH: str(header_length)} if header_length is not None else {}
    return httpx.Response(200, content=body, headers=headers)


OK = httpx.Response(200)


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record backoff delays instead of waiting them out (sync and asyncio)."""
    delays: list[float] = []

    async def fake_async_sleep(delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr(ferry_http.time, "sleep", delays.append)
    monkeypatch.setattr(ferry_http.asyncio, "sleep", fake_async_sleep)
    return delays


# --- error mapping --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, InvalidArgumentError),
        (401, UnauthenticatedError),
        (403, UnauthenticatedError),
        (404, NotFoundError),
        (408, DeadlineExceededError),
        (409, ServerError),
        (413, InvalidArgumentError),
        (500, ServerError),
        (501, ServerError),
        (502, ServerError),
        (503, UnavailableError),
        (504, DeadlineExceededError),
    ],
)
def test_http_status_maps_to_error_class(status: int, cls: type[FerryClientError]) -> None:
    error = error_from_http_status(status, "boom")
    assert type(error) is cls
    assert isinstance(error, FerryClientError)
    assert (error.message, error.status, error.grpc_code) == ("boom", status, None)
    assert str(error) == f"[{status}] boom"


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgumentError),
        (grpc.StatusCode.NOT_FOUND, NotFoundError),
        (grpc.StatusCode.UNAVAILABLE, UnavailableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, DeadlineExceededError),
        (grpc.StatusCode.UNAUTHENTICATED, UnauthenticatedError),
        (grpc.StatusCode.PERMISSION_DENIED, UnauthenticatedError),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, InvalidArgumentError),
        (grpc.StatusCode.INTERNAL, ServerError),
        (grpc.StatusCode.UNIMPLEMENTED, ServerError),
        (grpc.StatusCode.UNKNOWN, ServerError),
        (None, ServerError),
    ],
)
def test_grpc_code_maps_to_error_class(code: grpc.StatusCode | None, cls: type[FerryClientError]) -> None:
    error = error_from_grpc_code(code, "boom")
    assert type(error) is cls
    assert (error.message, error.status, error.grpc_code) == ("boom", None, code)


def test_errors_are_exported() -> None:
    for name in (
        "FerryClientError",
        "InvalidArgumentError",
        "NotFoundError",
        "UnavailableError",
        "DeadlineExceededError",
        "UnauthenticatedError",
        "ServerError",
        "InferResult",
    ):
        assert name in ferry_client.__all__


# --- HTTP request building --------------------------------------------------------------------------


def test_binary_infer_request_layout() -> None:
    recorder = Recorder(infer_response({}))
    image = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    names = np.array([b"a", b"bc"], dtype=object)
    with http_client(recorder) as client:
        client.infer("resnet", {"image": image, "names": names})
    request = recorder.last
    assert request.method == "POST"
    assert request.url.path == "/v2/models/resnet/infer"
    assert request.headers["content-type"] == "application/octet-stream"
    header, tail = split_request(request)
    assert header == {
        "parameters": {"binary_data_output": True},
        "inputs": [
            {"name": "image", "datatype": "FP32", "shape": [2, 3, 4], "parameters": {"binary_data_size": 96}},
            {"name": "names", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": 11}},
        ],
    }
    assert tail == image.tobytes() + b"\x01\0\0\0a\x02\0\0\0bc"


def test_json_infer_request_layout_with_outputs_id_parameters_and_version() -> None:
    recorder = Recorder(infer_response({}))
    with http_client(recorder) as client:
        client.infer(
            "my model/x",
            {"x": np.array([[1, 2]], np.int64), "flag": np.array([True]), "s": np.array(["h\u00e9"])},
            outputs=["probs", "labels"],
            model_version=3,
            request_id="req-1",
            parameters={"priority": 2, "note": "hi"},
            binary=False,
        )
    request = recorder.last
    assert request.url.raw_path == b"/v2/models/my%20model%2Fx/versions/3/infer"
    assert HEADER_LENGTH not in request.headers
    assert request.headers["content-type"] == "application/json"
    header, tail = split_request(request)
    assert tail == b""
    assert header == {
        "id": "req-1",
        "parameters": {"priority": 2, "note": "hi"},
        "inputs": [
            {"name": "x", "datatype": "INT64", "shape": [1, 2], "data": [1, 2]},
            {"name": "flag", "datatype": "BOOL", "shape": [1], "data": [True]},
            {"name": "s", "datatype": "BYTES", "shape": [1], "data": ["h\u00e9"]},
        ],
        "outputs": [
            {"name": "probs", "parameters": {"binary_data": False}},
            {"name": "labels", "parameters": {"binary_data": False}},
        ],
    }


def test_binary_outputs_and_classification_are_requested_per_output() -> None:
    recorder = Recorder(infer_response({}))
    with http_client(recorder) as client:
        client.infer("m", {"x": np.zeros(1, np.float32)}, outputs=["a"], classification={"b": 3})
    header, _ = split_request(recorder.last)
    assert "parameters" not in header  # no binary_data_output when outputs are listed
    assert header["outputs"] == [
        {"name": "a", "parameters": {"binary_data": True}},
        {"name": "b", "parameters": {"binary_data": True, "classification": 3}},
    ]


def test_datatype_overrides() -> None:
    recorder = Recorder(infer_response({}))
    values = np.array([1.0, 2.5, 1 + 2**-8], np.float32)
    with http_client(recorder) as client:
        client.infer(
            "m",
            {"b": values, "i": np.array([1, 2], np.int64), "h": [0.5, 1.5]},
            datatypes={"b": "BF16", "i": "INT32", "h": "FP16"},
        )
        header, tail = split_request(recorder.last)
        assert [(e["name"], e["datatype"], e["parameters"]["binary_data_size"]) for e in header["inputs"]] == [
            ("b", "BF16", 6),
            ("i", "INT32", 8),
            ("h", "FP16", 4),
        ]
        assert tail[:6] == float32_to_bf16(values).tobytes()
        assert bf16_to_float32(np.frombuffer(tail[:6], np.uint16)).tolist() == [1.0, 2.5, 1.0]
        assert tail[6:14] == np.array([1, 2], np.int32).tobytes()
        assert tail[14:] == np.array([0.5, 1.5], np.float16).tobytes()

        client.infer("m", {"b": values}, datatypes={"b": "BF16"}, binary=False)
        header, _ = split_request(recorder.last)
        assert header["inputs"][0]["data"] == [1.0, 2.5, 1.0]

        with pytest.raises(InvalidArgumentError, match="input 'f': cannot send float32 values as INT32"):
            client.infer("m", {"f": values}, datatypes={"f": "INT32"})
        with pytest.raises(InvalidArgumentError, match="input 'f': unsupported datatype 'FP8'"):
            client.infer("m", {"f": values}, datatypes={"f": "FP8"})
        with pytest.raises(InvalidArgumentError, match="input 'c': numpy dtype complex64 has no KServe V2 datatype"):
            client.infer("m", {"c": np.zeros(1, np.complex64)})
        with pytest.raises(InvalidArgumentError, match="not valid UTF-8"):
            client.infer("m", {"s": np.array([b"\xff"], object)}, binary=False)
    assert len(recorder.requests) == 2  # the refused inputs never reached the wire


def test_ml_dtypes_bfloat16_inputs_go_as_bf16() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    recorder = Recorder(infer_response({}))
    values = np.array([1.0, -2.0], ml_dtypes.bfloat16)
    with http_client(recorder) as client:
        client.infer("m", {"x": values})
    header, tail = split_request(recorder.last)
    assert header["inputs"][0]["datatype"] == "BF16"
    assert tail == values.tobytes()


@pytest.mark.parametrize(("compression", "decompress"), [("gzip", gzip.decompress), ("deflate", zlib.decompress)])
def test_request_compression(compression: str, decompress: Callable[[bytes], bytes]) -> None:
    recorder = Recorder(infer_response({}))
    array = np.zeros(1000, np.float32)
    with http_client(recorder) as client:
        client.infer("m", {"x": array}, compression=compression)  # type: ignore[arg-type]
    request = recorder.last
    assert request.headers["content-encoding"] == compression
    body = decompress(request.content)
    length = int(request.headers[HEADER_LENGTH])  # refers to the uncompressed body
    assert json.loads(body[:length])["inputs"][0]["parameters"]["binary_data_size"] == 4000
    assert body[length:] == array.tobytes()
    assert len(request.content) < len(body)
    with pytest.raises(ValueError, match="unsupported compression 'br'"), http_client(recorder) as client:
        client.infer("m", {"x": array}, compression="br")  # type: ignore[arg-type]


def test_auth_and_custom_headers() -> None:
    recorder = Recorder(infer_response({}))
    with http_client(recorder, bearer_token="s3cret", headers={"X-Team": "vision"}) as client:
        client.infer("m", {"x": np.zeros(1, np.float32)}, headers={"X-Trace": "t1"})
    assert recorder.last.headers["authorization"] == "Bearer s3cret"
    assert recorder.last.headers["x-team"] == "vision"
    assert recorder.last.headers["x-trace"] == "t1"


@pytest.mark.parametrize(
    ("url", "expected"),
    [("127.0.0.1:8000", "http://127.0.0.1:8000"), ("http://h:1/", "http://h:1"), ("https://h", "https://h")],
)
def test_url_normalisation(url: str, expected: str) -> None:
    with HttpClient(url) as client:
        assert client.url == expected


def test_control_plane_requests() -> None:
    recorder = Recorder(httpx.Response(200, json={"ok": True}))
    with http_client(recorder) as client:
        assert client.server_metadata() == {"ok": True}
        client.model_metadata("m")
        client.model_metadata("m", "2")
        client.model_config("m")
        client.model_config("m", 2)
        client.model_statistics()
        client.model_statistics("m")
        client.model_statistics("m", "1")
        client.repository_index()
        client.repository_index(ready=True)
        client.load_model("m")
        client.load_model("m", config='{"max_batch_size": 4}')
        client.load_model("m", config={"max_batch_size": 8})
        client.unload_model("m")
        with pytest.raises(ValueError, match="a version needs a model name"):
            client.model_statistics("", "1")
    seen = [(r.method, r.url.path, r.content) for r in recorder.requests]
    assert seen == [
        ("GET", "/v2", b""),
        ("GET", "/v2/models/m", b""),
        ("GET", "/v2/models/m/versions/2", b""),
        ("GET", "/v2/models/m/config", b""),
        ("GET", "/v2/models/m/versions/2/config", b""),
        ("GET", "/v2/models/stats", b""),
        ("GET", "/v2/models/m/stats", b""),
        ("GET", "/v2/models/m/versions/1/stats", b""),
        ("POST", "/v2/repository/index", b"{}"),
        ("POST", "/v2/repository/index", b'{"ready": true}'),
        ("POST", "/v2/repository/models/m/load", b"{}"),
        ("POST", "/v2/repository/models/m/load", b'{"parameters": {"config": "{\\"max_batch_size\\": 4}"}}'),
        ("POST", "/v2/repository/models/m/load", b'{"parameters": {"config": "{\\"max_batch_size\\": 8}"}}'),
        ("POST", "/v2/repository/models/m/unload", b"{}"),
    ]


def test_health_checks_answer_booleans() -> None:
    recorder = Recorder(
        OK,
        httpx.Response(503),
        httpx.Response(200),
        httpx.Response(404, json={"error": "x"}),
        httpx.Response(401, json={"error": "no token"}),
    )
    with http_client(recorder, retries=3) as client:
        assert client.is_server_live() is True
        assert client.is_server_ready() is False  # a 503 is an answer, not retried
        assert client.is_model_ready("m", "1") is True
        assert client.is_model_ready("nope") is False
        with pytest.raises(UnauthenticatedError, match="no token"):
            client.is_server_ready()
    assert [r.url.path for r in recorder.requests] == [
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/m/versions/1/ready",
        "/v2/models/nope/ready",
        "/v2/health/ready",
    ]


# --- HTTP response decoding ------------------------------------------------------------------------


def test_binary_and_json_outputs_decode() -> None:
    probs = np.array([[0.1, 0.9]], np.float32)
    labels = np.array([[b"cat", b"\xffraw"]], object)
    half = float32_to_bf16(np.array([1.5, -2.0], np.float32))
    count = np.array([7], np.int64)
    response = infer_response(
        {
            "probs": (probs, "FP32", True),
            "labels": (labels, "BYTES", True),
            "half": (half, "BF16", True),
            "count": (count, "INT64", False),
        },
        id="req-9",
        parameters={"sequence_end": True},
    )
    with http_client(Recorder(response)) as client:
        result = client.infer("m", {"x": np.zeros(1, np.float32)})
    assert isinstance(result, InferResult)
    assert (result.model_name, result.model_version, result.id) == ("m", "1", "req-9")
    assert result.parameters == {"sequence_end": True}
    assert list(result) == ["probs", "labels", "half", "count"]
    assert result.datatypes == {"probs": "FP32", "labels": "BYTES", "half": "BF16", "count": "INT64"}
    np.testing.assert_array_equal(result["probs"], probs)
    assert result["labels"].tolist() == [[b"cat", b"\xffraw"]]
    assert result["half"].dtype == np.float32 and result["half"].tolist() == [1.5, -2.0]
    assert result.as_numpy("count").tolist() == [7]
    assert result.as_numpy("missing") is None
    assert "probs" in result and len(result) == 4
    with pytest.raises(KeyError, match="no output 'missing' in the response"):
        result["missing"]


def test_bf16_json_output_comes_back_as_float32() -> None:
    half = float32_to_bf16(np.array([0.25, 3.0], np.float32))
    with http_client(Recorder(infer_response({"y": (half, "BF16", False)}))) as client:
        result = client.infer("m", {"x": np.zeros(1, np.float32)}, binary=False)
    assert result["y"].dtype == np.float32 and result["y"].tolist() == [0.25, 3.0]


#: A response header promising 8 bytes of output that the body does not hold.
SHORT_BODY = b'{"outputs": [{"name": "y", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}}]}'


@pytest.mark.parametrize(
    ("response", "cls", "message"),
    [
        (
            httpx.Response(400, json={"error": "input 'x' has the wrong shape"}),
            InvalidArgumentError,
            "input 'x' has the wrong shape",
        ),
        (httpx.Response(404, json={"error": "unknown model 'm'"}), NotFoundError, "unknown model 'm'"),
        (httpx.Response(503, json={"error": "model 'm' is loading"}), UnavailableError, "model 'm' is loading"),
        (httpx.Response(500, json={"error": "internal error: boom"}), ServerError, "internal error: boom"),
        (httpx.Response(502, text="Bad gateway from proxy"), ServerError, "Bad gateway from proxy"),
        (httpx.Response(500), ServerError, "Internal Server Error"),
        (
            httpx.Response(200, content=b"{not json"),
            ServerError,
            "malformed inference response: malformed JSON in response body",
        ),
        (
            httpx.Response(200, content=SHORT_BODY + b"\0" * 4, headers={HEADER_LENGTH: str(len(SHORT_BODY))}),
            ServerError,
            "malformed inference response: tensor 'y': binary_data_size 8 runs past the end",
        ),
    ],
)
def test_error_responses_raise_typed_errors(
    response: httpx.Response, cls: type[FerryClientError], message: str
) -> None:
    with http_client(Recorder(response)) as client, pytest.raises(cls) as info:
        client.infer("m", {"x": np.zeros(1, np.float32)})
    assert info.value.message.startswith(message)
    assert info.value.status == response.status_code


def test_malformed_json_on_control_plane() -> None:
    with (
        http_client(Recorder(httpx.Response(200, content=b"<html>"))) as client,
        pytest.raises(ServerError, match="malformed JSON in response body"),
    ):
        client.server_metadata()


# --- retries ---------------------------------------------------------------------------------------


def test_retries_on_503_then_succeeds(no_sleep: list[float]) -> None:
    unavailable = httpx.Response(503, json={"error": "warming up"})
    recorder = Recorder(unavailable, unavailable, infer_response({"y": (np.ones(2, np.float32), "FP32", True)}))
    with http_client(recorder, retries=3, backoff=0.2, max_backoff=0.3) as client:
        result = client.infer("m", {"x": np.zeros(1, np.float32)})
    assert result["y"].tolist() == [1.0, 1.0]
    assert len(recorder.requests) == 3
    assert recorder.requests[0].content == recorder.requests[2].content  # the same request, resent
    assert len(no_sleep) == 2
    assert 0 <= no_sleep[0] <= 0.2 and 0 <= no_sleep[1] <= 0.3  # full jitter under min(cap, base * 2**n)


def test_retries_give_up_with_the_last_error(no_sleep: list[float]) -> None:
    recorder = Recorder(httpx.Response(503, json={"error": "still loading"}))
    with http_client(recorder, retries=2) as client, pytest.raises(UnavailableError, match="still loading"):
        client.model_metadata("m")
    assert len(recorder.requests) == 3
    assert len(no_sleep) == 2


def test_no_retries_by_default_and_none_for_client_errors(no_sleep: list[float]) -> None:
    recorder = Recorder(httpx.Response(503, json={"error": "busy"}))
    with http_client(recorder) as client, pytest.raises(UnavailableError):
        client.server_metadata()
    recorder = Recorder(httpx.Response(400, json={"error": "bad"}))
    with http_client(recorder, retries=5) as client, pytest.raises(InvalidArgumentError):
        client.server_metadata()
    assert len(recorder.requests) == 1
    assert no_sleep == []


def test_retry_after_header_is_honoured_up_to_the_cap(no_sleep: list[float]) -> None:
    busy = httpx.Response(503, headers={"Retry-After": "2"})
    recorder = Recorder(busy, busy, OK)
    with http_client(recorder, retries=2, backoff=0.01, max_backoff=1.5) as client:
        client.unload_model("m")
    assert no_sleep == [1.5, 1.5]


def test_connection_errors_are_retried_then_unavailable(no_sleep: list[float]) -> None:
    recorder = Recorder(httpx.ConnectError("connection refused"))
    with http_client(recorder, retries=2) as client, pytest.raises(UnavailableError, match="connection refused"):
        client.is_server_live()
    assert len(recorder.requests) == 3
    recorder = Recorder(httpx.ConnectError("refused"), httpx.RemoteProtocolError("closed"), OK)
    with http_client(recorder, retries=2) as client:
        assert client.is_server_live() is True


def test_timeouts_become_deadline_exceeded_without_retry(no_sleep: list[float]) -> None:
    recorder = Recorder(httpx.ReadTimeout("timed out"))
    with http_client(recorder, retries=3) as client, pytest.raises(DeadlineExceededError, match="timed out"):
        client.infer("m", {"x": np.zeros(1, np.float32)}, timeout=0.5)
    assert len(recorder.requests) == 1
    assert recorder.last.extensions["timeout"] == {"connect": 0.5, "read": 0.5, "write": 0.5, "pool": 0.5}


def test_backoff_grows_exponentially_and_is_capped() -> None:
    import random

    rng = random.Random(1)
    for attempt in range(10):
        for _ in range(50):
            assert 0 <= ferry_http._backoff_delay(rng, attempt, 0.1, 2.0) <= min(2.0, 0.1 * 2**attempt)


# --- async HTTP ------------------------------------------------------------------------------------


async def test_async_http_client_round_trip_and_retry(no_sleep: list[float]) -> None:
    recorder = Recorder(httpx.Response(503), infer_response({"y": (np.array([3], np.int32), "INT32", True)}))
    async with AsyncHttpClient("127.0.0.1:8000", transport=httpx.MockTransport(recorder), retries=1) as client:
        result = await client.infer("m", {"x": np.array([1, 2], np.uint8)}, request_id="a")
        assert result["y"].tolist() == [3]
        header, tail = split_request(recorder.last)
        assert header["id"] == "a" and tail == b"\x01\x02"
        assert len(no_sleep) == 1
        recorder.responses = [httpx.Response(200, json=[{"name": "m", "version": "1", "state": "READY"}])]
        assert await client.repository_index() == [{"name": "m", "version": "1", "state": "READY"}]
        recorder.responses = [httpx.Response(404, json={"error": "unknown model 'q'"})]
        with pytest.raises(NotFoundError, match="unknown model 'q'"):
            await client.model_config("q")
        assert await client.is_model_ready("q") is False


# --- gRPC against an in-process fake servicer ------------------------------------------------------


class FakeServicer(pb_grpc.GRPCInferenceServiceServicer):
    """Echoes inputs back as outputs and records what arrived; can fail on demand."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.metadata: list[dict[str, str]] = []
        self.unavailable_left = 0

    def _note(self, request: Any, context: grpc.ServicerContext) -> None:
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        if self.unavailable_left:
            self.unavailable_left -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")

    def ServerLive(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._note(request, context)
        return pb.ServerLiveResponse(live=True)

    def ModelReady(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._note(request, context)
        if request.name != "m":
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model '{request.name}'")
        return pb.ModelReadyResponse(ready=True)

    def ModelConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._note(request, context)
        response = pb.ModelConfigResponse()
        response.config.name = request.name
        response.config.max_batch_size = 4
        response.config.input.add(name="x", dims=[-1, 3])
        return response

    def ModelStatistics(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._note(request, context)
        response = pb.ModelStatisticsResponse()
        stats = response.model_stats.add(name="m", version="1", inference_count=2**40)
        stats.inference_stats.success.count = 3
        return response

    def RepositoryIndex(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._note(request, context)
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(name="m", version="1", state="READY")]
        )

    def RepositoryModelLoad(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._note(request, context)
        return pb.RepositoryModelLoadResponse()

    def ModelInfer(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._note(request, context)
        if request.model_name == "bad":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "input 'x' has the wrong shape")
        response = pb.ModelInferResponse(model_name=request.model_name, model_version="1", id=request.id)
        response.parameters["echoed"].bool_param = True
        for tensor, raw in zip(request.inputs, request.raw_input_contents, strict=True):
            out = response.outputs.add(name="out_" + tensor.name, datatype=tensor.datatype, shape=tensor.shape)
            if request.model_name == "typed" and tensor.datatype == "INT32":
                out.contents.int_contents.extend(np.frombuffer(raw, "<i4").tolist())
            else:
                response.raw_output_contents.append(raw)
        if request.model_name == "typed":
            del response.raw_output_contents[:]
        return response


@pytest.fixture(scope="module")
def fake_grpc() -> Iterator[tuple[str, FakeServicer]]:
    servicer = FakeServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_grpc_infer_request_and_response(fake_grpc: tuple[str, FakeServicer]) -> None:
    url, servicer = fake_grpc
    values = np.array([1.0, 2.5], np.float32)
    with GrpcClient(url, bearer_token="tok", headers={"X-Team": "vision"}) as client:
        result = client.infer(
            "m",
            {"x": np.arange(6, dtype=np.int32).reshape(2, 3), "s": np.array([b"ab", b""], object), "b": values},
            outputs=["out_x"],
            classification={"out_s": 2},
            datatypes={"b": "BF16"},
            model_version="2",
            request_id="r7",
            parameters={"flag": True, "n": 3, "f": 0.5, "t": "txt"},
            compression="gzip",
        )
    request = servicer.requests[-1]
    assert (request.model_name, request.model_version, request.id) == ("m", "2", "r7")
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("x", "INT32", [2, 3]),
        ("s", "BYTES", [2]),
        ("b", "BF16", [2]),
    ]
    assert request.raw_input_contents[1] == b"\x02\0\0\0ab\0\0\0\0"
    assert request.raw_input_contents[2] == float32_to_bf16(values).tobytes()
    assert {k: v.WhichOneof("parameter_choice") for k, v in request.parameters.items()} == {
        "flag": "bool_param",
        "n": "int64_param",
        "f": "double_param",
        "t": "string_param",
    }
    assert [(o.name, dict(o.parameters)) for o in request.outputs][0] == ("out_x", {})
    assert request.outputs[1].name == "out_s" and request.outputs[1].parameters["classification"].int64_param == 2
    assert servicer.metadata[-1]["authorization"] == "Bearer tok"
    assert servicer.metadata[-1]["x-team"] == "vision"
    assert (result.model_name, result.model_version, result.id) == ("m", "1", "r7")
    assert result.parameters == {"echoed": True}
    assert result["out_x"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert result["out_s"].tolist() == [b"ab", b""]
    assert result["out_b"].dtype == np.float32 and result["out_b"].tolist() == [1.0, 2.5]


def test_grpc_typed_contents_outputs_decode(fake_grpc: tuple[str, FakeServicer]) -> None:
    url, _ = fake_grpc
    with GrpcClient(url) as client:
        result = client.infer("typed", {"x": np.array([[5, -6]], np.int32)})
    assert result["out_x"].dtype == np.int32 and result["out_x"].tolist() == [[5, -6]]


def test_grpc_control_plane_dicts_match_rest_shapes(fake_grpc: tuple[str, FakeServicer]) -> None:
    url, servicer = fake_grpc
    with GrpcClient(url) as client:
        assert client.is_server_live() is True
        assert client.is_model_ready("m") is True
        assert client.is_model_ready("nope") is False
        config = client.model_config("m")
        assert config["name"] == "m" and config["max_batch_size"] == 4
        assert config["input"][0]["dims"] == [-1, 3]  # int64 as numbers, not strings
        assert config["input"][0]["data_type"] == "TYPE_INVALID"  # defaults included, enums by name
        stats = client.model_statistics("m")
        assert stats["model_stats"][0]["inference_count"] == 2**40
        assert stats["model_stats"][0]["inference_stats"]["success"] == {"count": 3, "ns": 0}
        assert client.repository_index() == [{"name": "m", "version": "1", "state": "READY", "reason": ""}]
        client.load_model("m", config={"max_batch_size": 2})
        load = servicer.requests[-1]
        assert load.model_name == "m"
        assert json.loads(load.parameters["config"].string_param) == {"max_batch_size": 2}


def test_grpc_errors_and_retries(
    fake_grpc: tuple[str, FakeServicer], no_sleep: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, servicer = fake_grpc
    monkeypatch.setattr(ferry_grpc.time, "sleep", no_sleep.append)
    with GrpcClient(url, retries=2, backoff=0.05) as client:
        with pytest.raises(InvalidArgumentError) as info:
            client.infer("bad", {"x": np.zeros(1, np.float32)})
        assert info.value.message == "input 'x' has the wrong shape"
        assert info.value.grpc_code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(InvalidArgumentError, match="input 'x': unsupported datatype 'FP8'"):
            client.infer("m", {"x": np.zeros(1, np.float32)}, datatypes={"x": "FP8"})
        with pytest.raises(InvalidArgumentError, match="parameter 'p' must be a bool, int, float or str, got list"):
            client.infer("m", {"x": np.zeros(1, np.float32)}, parameters={"p": [1]})
        servicer.unavailable_left = 2
        before = len(servicer.requests)
        assert client.is_server_live() is True
        assert len(servicer.requests) - before == 3
        assert len(no_sleep) == 2 and all(0 <= d <= 0.1 for d in no_sleep)
        servicer.unavailable_left = 3
        with pytest.raises(UnavailableError, match="warming up"):
            client.is_server_live()
    servicer.unavailable_left = 0


def test_grpc_unreachable_server_is_unavailable() -> None:
    with GrpcClient("127.0.0.1:1", timeout=5) as client, pytest.raises(UnavailableError):
        client.is_server_live()


def test_grpc_url_prefixes_select_tls() -> None:
    client = GrpcClient("grpcs://example.com:443")
    assert client.url == "example.com:443" and client._credentials is not None
    client.close()
    client = GrpcClient("grpc://127.0.0.1:8001")
    assert client.url == "127.0.0.1:8001" and client._credentials is None
    client.close()


async def test_async_grpc_client(fake_grpc: tuple[str, FakeServicer]) -> None:
    url, servicer = fake_grpc
    async with AsyncGrpcClient(url, bearer_token="t2") as client:
        assert await client.is_server_live() is True
        assert await client.is_model_ready("nope") is False
        result = await client.infer("m", {"x": np.array([1.5], np.float64)}, request_id="z")
        assert result["out_x"].tolist() == [1.5] and result.id == "z"
        assert (await client.model_config("m"))["input"][0]["dims"] == [-1, 3]
        with pytest.raises(InvalidArgumentError, match="wrong shape"):
            await client.infer("bad", {"x": np.zeros(1, np.float32)})
    assert servicer.metadata[-1]["authorization"] == "Bearer t2"
    await asyncio.sleep(0)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_unreachable_server_is_named_by_both_http_clients() -> None:
    """As the gRPC client's error does, "cannot reach the server" says which address was tried."""
    port = closed_port()
    with HttpClient(f"127.0.0.1:{port}") as client, pytest.raises(UnavailableError) as info:
        client.server_metadata()
    assert f"cannot reach the server at http://127.0.0.1:{port}:" in str(info.value)

    async def async_call() -> None:
        async with AsyncHttpClient(f"127.0.0.1:{port}") as client:
            await client.server_metadata()

    with pytest.raises(UnavailableError, match=f"cannot reach the server at http://127.0.0.1:{port}:"):
        asyncio.run(async_call())
