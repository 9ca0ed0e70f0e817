"""An intake's front doors relay everything but inference to a real core on unix sockets.

The core is a real DataPlane and ModelManager on a small repository, its full REST app (with the
dashboard) on a uvicorn unix socket and its gRPC server on ``unix:``; the front is ForwardToCore
under uvicorn and a gRPC server with ForwardingServicer, both on loopback. The official tritonclient
talks to the front; answers are compared with the same calls made to the core directly. Test-only
hooks on the core (a few ASGI paths, one gated RPC) let a test cause what it checks: a request
held in the core, a body read while the client still sends, a deadline that must expire.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import queue
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
import uvicorn
from google.protobuf.message_factory import GetMessageClass
from starlette.types import ASGIApp, Receive, Scope, Send
from tritonclient.utils import InferenceServerException

from ferry.api.connection_limits import ConnectionGuard, HttpConnectionLimits
from ferry.api.dataplane import DataPlane
from ferry.api.grpc import InferenceServicer, create_grpc_server
from ferry.api.http import create_http_app
from ferry.api.shared_memory import SharedMemoryRegistry
from ferry.dashboard import mount_dashboard
from ferry.intake.forward_grpc import LOCAL_METHODS, SERVICE, ForwardingServicer
from ferry.intake.forward_http import UNREACHABLE, ForwardToCore
from ferry.metrics import Metrics
from ferry.repository.manager import ControlMode, ModelManager

from ..conftest import MODEL_REPO, free_port

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MIB = 1024 * 1024
WAIT = 30  # seconds: an upper bound on events the test itself causes, never a timing assertion
GATED_MODEL = "gated"
BROKEN_MODEL = "broken"  # fails to load at start-up: the core answers UNAVAILABLE for it


class CoreHooks:
    """Test-only ASGI paths in front of the core's app; what they saw is set from the server thread.

    ``/test/hold`` answers only after the client disconnected; ``/test/stream`` reports its first
    body chunk, then reads on (or reports the disconnect); ``/test/headers`` echoes the request
    headers and sets two cookies."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.held = threading.Event()
        self.hold_saw_disconnect = threading.Event()
        self.first_chunk = threading.Event()
        self.stream_saw_disconnect = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path == "/test/hold":
            self.held.set()
            while (await receive())["type"] != "http.disconnect":
                pass
            self.hold_saw_disconnect.set()
        elif path == "/test/stream":
            total, more = 0, True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    self.stream_saw_disconnect.set()
                    return
                total += len(message.get("body", b""))
                more = message.get("more_body", False)
                if total:
                    self.first_chunk.set()
            await _answer(send, 200, json.dumps({"received": total}).encode(), [(b"content-type", b"application/json")])
        elif path == "/test/headers":
            seen = [[name.decode(), value.decode()] for name, value in scope["headers"]]
            body = json.dumps(
                {"headers": seen, "query": scope["query_string"].decode(), "raw_path": scope["raw_path"].decode()}
            )
            cookies = [(b"set-cookie", b"a=1; Path=/"), (b"set-cookie", b"b=2; Path=/")]
            await _answer(send, 200, body.encode(), [(b"content-type", b"application/json"), *cookies])
        else:
            await self.app(scope, receive, send)


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class CoreCalls(grpc.aio.ServerInterceptor):
    """Records the name of every RPC the core's gRPC server receives."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        self.methods.append(details.method.rsplit("/", 1)[-1])
        return await continuation(details)


class GatedCore(InferenceServicer):
    """The core's servicer, except that loading ``GATED_MODEL`` waits until the call is cancelled,
    recording the deadline and metadata the call arrived with."""

    def __init__(self, plane: DataPlane) -> None:
        super().__init__(plane)
        self.gated_remaining: list[float | None] = []
        self.gated_metadata: list[dict[str, Any]] = []
        self.gated_cancelled = threading.Event()

    async def RepositoryModelLoad(self, request, context):
        if request.model_name != GATED_MODEL:
            return await super().RepositoryModelLoad(request, context)
        self.gated_remaining.append(context.time_remaining())
        self.gated_metadata.append(dict(context.invocation_metadata()))
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.gated_cancelled.set()
            raise


class RelayEverything(ForwardingServicer):
    """Relays inference too: exercises the streaming relay on the one streaming RPC there is."""

    local_methods = frozenset()


class Stack:
    """A core on unix sockets and a front on loopback ports, served by one event loop in a thread."""

    def __init__(self, directory: Path, repository: Path | None) -> None:
        self.rest_socket = str(directory / "rest.sock")
        self.grpc_socket = str(directory / "grpc.sock")
        self.repository = repository
        self.http_port, self.grpc_port, self.relay_all_port = free_port(), free_port(), free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.servers: list[uvicorn.Server] = []
        self.tasks: list[asyncio.Task] = []
        self.grpc_servers: list[grpc.aio.Server] = []
        self.hooks: CoreHooks | None = None
        self.core_servicer: GatedCore | None = None
        self.core_calls = CoreCalls()

    def run(self, coroutine: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def start(self) -> Stack:
        self.thread.start()
        self.run(self._start())
        return self

    @staticmethod
    def _guarded() -> type[asyncio.BaseProtocol]:
        """Ferry's connection-limiting protocol with its defaults, as the server's REST listeners run."""
        return ConnectionGuard(HttpConnectionLimits()).protocol()

    async def _serve(self, config: uvicorn.Config) -> None:
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign] - not the main thread
        self.servers.append(server)
        self.tasks.append(asyncio.create_task(server.serve()))
        while not server.started:
            await asyncio.sleep(0.01)

    async def _start(self) -> None:
        manager = ModelManager(
            self.repository or MODEL_REPO,
            control_mode=ControlMode.EXPLICIT,
            startup_models=["simple", "dynamic_shape", "digits", BROKEN_MODEL],
        )
        self.plane = DataPlane(manager, shared_memory=SharedMemoryRegistry())
        if self.repository is not None:  # a real core; without one the front's sockets lead nowhere
            metrics = Metrics(manager.ready_models)
            manager.on_loaded = metrics.attach
            await manager.start()
            self.plane.started = True
            app = create_http_app(self.plane, 128 * MIB, 128 * MIB)
            mount_dashboard(app, self.plane, metrics.registry)
            self.hooks = CoreHooks(app)
            await self._serve(
                uvicorn.Config(
                    self.hooks, uds=self.rest_socket, lifespan="off", log_level="warning", http=self._guarded()
                )
            )
            self.core_servicer = GatedCore(self.plane)
            core_grpc = create_grpc_server(
                self.plane, f"unix:{self.grpc_socket}", 128 * MIB, [self.core_calls], servicer=self.core_servicer
            )
            await core_grpc.start()
            self.grpc_servers.append(core_grpc)
        self.forward = ForwardToCore(self.rest_socket)
        front_config = uvicorn.Config(
            self.forward,
            host="127.0.0.1",
            port=self.http_port,
            lifespan="off",
            log_level="warning",
            http=self._guarded(),
        )
        await self._serve(front_config)
        self.core_channel = grpc.aio.insecure_channel(f"unix:{self.grpc_socket}")
        servicer = ForwardingServicer(self.plane, 128 * MIB, self.core_channel)
        front_grpc = create_grpc_server(self.plane, f"127.0.0.1:{self.grpc_port}", 128 * MIB, servicer=servicer)
        await front_grpc.start()
        self.grpc_servers.append(front_grpc)
        relay_all = RelayEverything(self.plane, 128 * MIB, self.core_channel)
        relay_grpc = create_grpc_server(self.plane, f"127.0.0.1:{self.relay_all_port}", 128 * MIB, servicer=relay_all)
        await relay_grpc.start()
        self.grpc_servers.append(relay_grpc)

    def stop(self) -> None:
        self.run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)

    async def _stop(self) -> None:
        for server in self.grpc_servers:
            await server.stop(None)
        for server in self.servers:
            server.should_exit = True
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.forward.aclose()
        await self.core_channel.close()
        await self.plane.manager.stop(5)

    # --- clients ---------------------------------------------------------------------------------

    def front_http(self) -> thttp.InferenceServerClient:
        return thttp.InferenceServerClient(f"127.0.0.1:{self.http_port}")

    def front_grpc(self) -> tgrpc.InferenceServerClient:
        return tgrpc.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")

    def core_grpc(self) -> tgrpc.InferenceServerClient:
        return tgrpc.InferenceServerClient(f"unix:{self.grpc_socket}")

    def raw_front(self) -> httpx.Client:
        """A plain HTTP client that neither adds Accept-Encoding nor decodes gzip on its own."""
        return httpx.Client(base_url=f"http://127.0.0.1:{self.http_port}", timeout=WAIT)

    def raw_core(self) -> httpx.Client:
        return httpx.Client(transport=httpx.HTTPTransport(uds=self.rest_socket), base_url="http://core", timeout=WAIT)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("intake")
    repository = root / "models"
    for name in ("simple", "simple_fp32", "dynamic_shape", "digits"):
        shutil.copytree(MODEL_REPO / name, repository / name)
    shutil.copytree(MODEL_REPO / "simple", repository / BROKEN_MODEL)
    (repository / BROKEN_MODEL / "config.pbtxt").write_text(
        (MODEL_REPO / "simple" / "config.pbtxt").read_text().replace('name: "simple"', f'name: "{BROKEN_MODEL}"')
    )
    (repository / BROKEN_MODEL / "1" / "model.onnx").write_bytes(b"not an onnx model")
    running = Stack(root, repository).start()
    yield running
    running.stop()


def _error(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


# --- health, metadata, config, index ---------------------------------------------------------


@pytest.mark.timeout(60)
def test_health_and_metadata_match_the_core(stack: Stack) -> None:
    http, front, core = stack.front_http(), stack.front_grpc(), stack.core_grpc()
    assert http.is_server_live() and http.is_server_ready() and http.is_model_ready("simple")
    assert front.is_server_live() and front.is_server_ready() and front.is_model_ready("simple")
    assert not front.is_model_ready("simple_fp32")  # in the repository, not loaded
    with stack.raw_core() as direct:
        for path in ("/v2", "/v2/models/simple", "/v2/models/simple/config", "/v2/models/dynamic_shape"):
            assert stack.raw_front().get(path).json() == direct.get(path).json(), path
    assert http.get_server_metadata() == stack.raw_core().get("/v2").json()
    assert front.get_server_metadata(as_json=True) == core.get_server_metadata(as_json=True)
    assert front.get_model_metadata("simple", as_json=True) == core.get_model_metadata("simple", as_json=True)
    assert front.get_model_config("simple", as_json=True) == core.get_model_config("simple", as_json=True)
    assert front.get_model_repository_index(as_json=True) == core.get_model_repository_index(as_json=True)
    names = {row["name"] for row in http.get_model_repository_index()}
    assert names == {"simple", "simple_fp32", "dynamic_shape", "digits", BROKEN_MODEL}


@pytest.mark.timeout(60)
def test_errors_are_the_cores_own(stack: Stack) -> None:
    with stack.raw_front() as front, stack.raw_core() as direct:
        for path in ("/v2/models/nonexistent", f"/v2/models/{BROKEN_MODEL}", "/v2/models/simple/versions/x/config"):
            got, expected = front.get(path), direct.get(path)
            assert got.status_code == expected.status_code >= 400, path
            assert got.json() == expected.json()
            assert got.headers["content-type"] == expected.headers["content-type"]
    front_grpc, core_grpc = stack.front_grpc(), stack.core_grpc()
    for model in ("nonexistent", BROKEN_MODEL):  # NOT_FOUND, and the core's own UNAVAILABLE (failed load)
        got = _error(lambda m=model: front_grpc.get_model_metadata(m))
        expected = _error(lambda m=model: core_grpc.get_model_metadata(m))
        assert (got.status(), got.message()) == (expected.status(), expected.message())
    assert _error(lambda: front_grpc.get_model_metadata(BROKEN_MODEL)).status() == "StatusCode.UNAVAILABLE"


@pytest.mark.timeout(60)
def test_every_rpc_but_inference_is_answered_by_the_core(stack: Stack) -> None:
    """Each relayed unary method, called with an empty request, reaches the core and answers as the
    core does (a stream's requests to a decoupled model are relayed too: see test_decoupled.py)."""
    assert {"ModelInfer", "ModelStreamInfer"} == LOCAL_METHODS
    relayed = [m for m in SERVICE.methods if m.name not in LOCAL_METHODS]
    assert len(relayed) == len(SERVICE.methods) - 2
    with (
        grpc.insecure_channel(f"127.0.0.1:{stack.grpc_port}") as front,
        grpc.insecure_channel(f"unix:{stack.grpc_socket}") as direct,
    ):
        for method in relayed:
            path = f"/{SERVICE.full_name}/{method.name}"
            request = GetMessageClass(method.input_type)()
            deserialize = GetMessageClass(method.output_type).FromString
            seen = len(stack.core_calls.methods)
            answers = [
                _answer_of(channel.unary_unary(path, type(request).SerializeToString, deserialize), request)
                for channel in (front, direct)
            ]
            assert stack.core_calls.methods[seen:] == [method.name] * 2, answers
            assert answers[0] == answers[1], method.name


@pytest.mark.timeout(60)
def test_relayed_messages_pass_through_unparsed(stack: Stack) -> None:
    """The intake relays a message's bytes as they came: bytes that are no valid message reach the
    core (the intake parsed and refused them itself before) and get the core's own answer."""
    garbage = b"\xff" * 64
    path = f"/{SERVICE.full_name}/ModelMetadata"
    with (
        grpc.insecure_channel(f"127.0.0.1:{stack.grpc_port}") as front,
        grpc.insecure_channel(f"unix:{stack.grpc_socket}") as direct,
    ):
        seen = len(stack.core_calls.methods)
        answers = [_answer_of(channel.unary_unary(path), garbage) for channel in (front, direct)]
        assert stack.core_calls.methods[seen:] == ["ModelMetadata"] * 2, answers
    assert answers[0] == answers[1]
    assert answers[0][0] == "StatusCode.INVALID_ARGUMENT", answers


def _answer_of(multicallable: Any, request: Any) -> tuple[str, Any]:
    try:
        return "OK", multicallable(request, timeout=WAIT)
    except grpc.RpcError as exc:
        return str(exc.code()), exc.details()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("relayed", [False, True], ids=["front", "relay_all"])
def test_stream_infer(stack: Stack, relayed: bool) -> None:
    """The front serves stream inference itself (the core sees no ModelStreamInfer for a model that
    is not decoupled); a servicer told to relay everything relays the stream whole."""
    results: queue.Queue = queue.Queue()
    client = tgrpc.InferenceServerClient(f"127.0.0.1:{stack.relay_all_port if relayed else stack.grpc_port}")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [tgrpc.InferInput("INPUT0", [1, 16], "INT32"), tgrpc.InferInput("INPUT1", [1, 16], "INT32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    seen = len(stack.core_calls.methods)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for _ in range(2):
            client.async_stream_infer("simple", inputs)
        answers = [results.get(timeout=WAIT) for _ in range(2)]
        client.async_stream_infer("nonexistent", inputs)
        _, error = results.get(timeout=WAIT)
    finally:
        client.stop_stream()
    for result, no_error in answers:
        assert no_error is None
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    assert "unknown model" in error.message()  # an error answers its request, not the stream
    assert ("ModelStreamInfer" in stack.core_calls.methods[seen:]) == relayed


# --- repository control, statistics, shared memory --------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_load_and_unload_through_the_front(stack: Stack, protocol: str) -> None:
    client = stack.front_http() if protocol == "http" else stack.front_grpc()
    client.load_model("simple_fp32")
    try:
        assert client.is_model_ready("simple_fp32")
        assert stack.core_grpc().is_model_ready("simple_fp32")  # loaded in the core, not in the front
    finally:
        client.unload_model("simple_fp32")
    assert not stack.core_grpc().is_model_ready("simple_fp32")
    error = _error(lambda: client.load_model("nonexistent"))
    assert "nonexistent" in error.message()


@pytest.mark.timeout(60)
def test_statistics_come_from_the_core(stack: Stack) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [tgrpc.InferInput("INPUT0", [1, 16], "INT32"), tgrpc.InferInput("INPUT1", [1, 16], "INT32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    before = stack.core_grpc().get_inference_statistics("simple", as_json=True)
    result = stack.front_grpc().infer("simple", inputs)  # served by the front's own data plane
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    assert "ModelInfer" not in stack.core_calls.methods
    after_grpc = stack.front_grpc().get_inference_statistics("simple", as_json=True)
    after_http = stack.front_http().get_inference_statistics("simple")
    assert after_grpc == stack.core_grpc().get_inference_statistics("simple", as_json=True)
    count = int(after_grpc["model_stats"][0]["inference_count"])
    assert count == int(before["model_stats"][0].get("inference_count", 0)) + 1
    assert after_http["model_stats"][0]["inference_count"] == count


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_system_shared_memory_registration(stack: Stack, protocol: str) -> None:
    client = stack.front_http() if protocol == "http" else stack.front_grpc()
    name = f"forward_{protocol}"
    handle = shm.create_shared_memory_region(name, f"/{name}", 64)
    try:
        client.register_system_shared_memory(name, f"/{name}", 64)
        status = stack.core_grpc().get_system_shared_memory_status(name, as_json=True)
        assert status["regions"][name]["byte_size"] == "64"  # registered in the core
        if protocol == "http":
            expected = stack.raw_core().get(f"/v2/systemsharedmemory/region/{name}/status").json()
            assert client.get_system_shared_memory_status(name) == expected
        else:
            assert client.get_system_shared_memory_status(name, as_json=True) == status
        client.unregister_system_shared_memory(name)
        assert stack.core_grpc().get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
    finally:
        shm.destroy_shared_memory_region(handle)


# --- HTTP verbatim: headers, cookies, gzip, bodies, the dashboard ----------------------------


@pytest.mark.timeout(60)
def test_headers_path_and_cookies_pass_unchanged(stack: Stack) -> None:
    headers = [
        ("Authorization", "Bearer token-1"),
        ("X-Twice", "one"),
        ("X-Twice", "two"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "dropped"),
        ("Proxy-Authorization", "dropped"),
    ]
    with stack.raw_front() as front:
        response = front.get("/test/headers?b=2&a=%20x", headers=headers)
    assert response.status_code == 200
    seen = response.json()
    names = [name for name, _ in seen["headers"]]
    assert ["authorization", "Bearer token-1"] in seen["headers"]
    assert [value for name, value in seen["headers"] if name == "x-twice"] == ["one", "two"]
    assert not {"connection", "x-hop", "proxy-authorization"} & set(names)
    assert seen["query"] == "b=2&a=%20x"
    assert seen["raw_path"] == "/test/headers"
    assert response.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]
    assert response.headers.get_list("server") == ["uvicorn"]  # the front's own; the core's is dropped
    assert len(response.headers.get_list("date")) == 1


@pytest.mark.timeout(60)
def test_gzip_response_passes_through_compressed(stack: Stack) -> None:
    body = {"inputs": [{"name": "x", "shape": [1, 4096], "datatype": "FP32", "data": [1.0] * 4096}]}
    headers = {"Accept-Encoding": "gzip"}
    with stack.raw_front() as front, stack.raw_core() as direct:
        got = front.post("/v2/models/dynamic_shape/infer", json=body, headers=headers)
        expected = direct.post("/v2/models/dynamic_shape/infer", json=body, headers=headers)
        assert got.status_code == expected.status_code == 200
        assert got.headers["content-encoding"] == expected.headers["content-encoding"] == "gzip"
        with front.stream("POST", "/v2/models/dynamic_shape/infer", json=body, headers=headers) as streamed:
            raw = b"".join(streamed.iter_raw())
    assert raw[:2] == b"\x1f\x8b"  # still gzip on the wire from the front
    assert json.loads(gzip.decompress(raw)) == expected.json()
    assert got.json()["outputs"][0]["data"] == [3.0] * 4096


@pytest.mark.timeout(120)
def test_a_50_mb_infer_through_the_fastapi_route(stack: Stack) -> None:
    x = np.linspace(0, 1, 50 * MIB // 4, dtype=np.float32).reshape(1, -1)
    tensor = thttp.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    result = stack.front_http().infer(
        "dynamic_shape", [tensor], outputs=[thttp.InferRequestedOutput("y", binary_data=True)]
    )
    y = result.as_numpy("y")
    assert y.shape == x.shape
    np.testing.assert_allclose(y[0, ::100_000], x[0, ::100_000] * 2 + 1, rtol=1e-6)


@pytest.mark.timeout(60)
def test_request_body_streams_to_the_core(stack: Stack) -> None:
    """The client sends its second part only once the core has the first: buffering would hang."""
    assert stack.hooks is not None
    stack.hooks.first_chunk.clear()
    first, rest = b"a" * MIB, b"b" * (8 * MIB)

    def parts() -> Iterator[bytes]:
        yield first
        assert stack.hooks.first_chunk.wait(WAIT), "the core got nothing before the client sent the rest"
        yield rest

    with stack.raw_front() as front:
        response = front.post("/test/stream", content=parts(), headers={"Content-Length": str(len(first) + len(rest))})
    assert response.json() == {"received": len(first) + len(rest)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("request_bytes", "arrived", "saw_disconnect"),
    [
        (b"GET /test/hold HTTP/1.1\r\nHost: front\r\n\r\n", "held", "hold_saw_disconnect"),
        (  # the client leaves after 1000 bytes of a 2 MB body
            b"POST /test/stream HTTP/1.1\r\nHost: front\r\nContent-Length: 2000000\r\n\r\n" + b"x" * 1000,
            "first_chunk",
            "stream_saw_disconnect",
        ),
    ],
    ids=["waiting-for-the-answer", "mid-body"],
)
def test_client_disconnect_cancels_the_forwarded_request(
    stack: Stack, request_bytes: bytes, arrived: str, saw_disconnect: str
) -> None:
    assert stack.hooks is not None
    for event in (arrived, saw_disconnect):
        getattr(stack.hooks, event).clear()
    with socket.create_connection(("127.0.0.1", stack.http_port)) as client:
        client.sendall(request_bytes)
        assert getattr(stack.hooks, arrived).wait(WAIT)  # the request is in the core now
    assert getattr(stack.hooks, saw_disconnect).wait(WAIT)  # the front closed its connection to the core


@pytest.mark.timeout(60)
def test_classify_image_endpoint(stack: Stack, digit_pngs: tuple[list[bytes], np.ndarray]) -> None:
    files, labels = digit_pngs
    upload = {"image": ("digit.png", files[0], "image/png")}
    with stack.raw_front() as front, stack.raw_core() as direct:
        got = front.post("/v2/models/digits/classify?top_k=2", files=upload)
        expected = direct.post("/v2/models/digits/classify?top_k=2", files=upload)
    assert got.status_code == expected.status_code == 200
    assert got.json() == expected.json()
    classes = got.json()["results"][0]["classes"]
    assert len(classes) == 2 and classes[0]["index"] == int(labels[0])


@pytest.mark.timeout(60)
def test_dashboard_page_and_static_file(stack: Stack) -> None:
    with stack.raw_front() as front, stack.raw_core() as direct:
        for path in ("/", "/dashboard/static/app.js", "/dashboard/api/models", "/openapi.json"):
            got, expected = front.get(path), direct.get(path)
            assert got.status_code == expected.status_code == 200, path
            assert got.content == expected.content, path
            assert got.headers["content-type"] == expected.headers["content-type"]
        page = front.get("/")
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert b"<html" in page.content.lower()


# --- gRPC: metadata and deadlines -----------------------------------------------------------


@pytest.mark.timeout(60)
def test_grpc_deadline_and_metadata_reach_the_core(stack: Stack) -> None:
    core = stack.core_servicer
    assert core is not None
    core.gated_cancelled.clear()
    client = stack.front_grpc()
    error = _error(lambda: client.load_model(GATED_MODEL, headers={"authorization": "Bearer t"}, client_timeout=2))
    assert error.status() == "StatusCode.DEADLINE_EXCEEDED"
    # the core's call ended with the caller's (and so had begun: what it arrived with is recorded)
    assert core.gated_cancelled.wait(WAIT)
    remaining = core.gated_remaining[-1]  # None had the deadline not been relayed
    assert remaining is not None and remaining < 3  # the caller's 2 s (gRPC rounds the header up)
    assert core.gated_metadata[-1]["authorization"] == "Bearer t"


# --- the core unreachable -------------------------------------------------------------------


@pytest.fixture()
def orphan_front(tmp_path: Path) -> Iterator[Stack]:
    """A front whose core sockets lead nowhere: the gRPC one is missing, the REST one refuses."""
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(tmp_path / "rest.sock"))  # a socket file nobody listens on, as after a crash
    stale.close()
    running = Stack(tmp_path, None).start()
    yield running
    running.stop()


@pytest.mark.timeout(60)
def test_core_unreachable(orphan_front: Stack) -> None:
    with orphan_front.raw_front() as front:
        response = front.get("/v2/health/ready")
        assert response.status_code == 503
        assert response.json() == {"error": UNREACHABLE}
        response = front.post("/v2/repository/index", content=b"{}")
        assert response.status_code == 503
    error = _error(lambda: orphan_front.front_grpc().get_server_metadata())
    assert error.status() == "StatusCode.UNAVAILABLE"
    assert "model process is not reachable" in error.message()
