"""Pre-encoded requests and the lean senders the perf workers use.

A load generator must measure the server, not its own encoding: every request is turned into
wire bytes once (reusing the SDK's own builders, so the tool sends exactly what the clients
send), and the hot loop only ships bytes. HTTP goes through pre-built request bytes parsed
with httptools when installed (the client's ``perf`` extra), else aiohttp, else httpx (whose
asyncio pool is several times slower under concurrency). gRPC goes as pre-built HTTP/2 frames
(rawgrpc.py, needs hpack from the same extra) or through a grpc.aio channel with identity
serializers (``--grpc-engine grpcio``).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any, Protocol

from ..grpc import _infer_request
from ..http import _HttpBase
from .inputs import Sample

GRPC_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class Security:
    """Transport security and credentials shared by the tool's own calls and its workers."""

    ssl: bool = False
    root_certificates: str | None = None  # file paths, read where needed
    certificate_chain: str | None = None
    private_key: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def file_bytes(self, path: str | None) -> bytes | None:
        if path is None:
            return None
        with open(path, "rb") as handle:
            return handle.read()

    def ssl_context(self) -> SSLContext | None:  # (the field ``ssl`` hides the module in annotations)
        if not (self.ssl or self.root_certificates or self.certificate_chain):
            return None
        context = ssl.create_default_context(cafile=self.root_certificates)
        if self.certificate_chain:
            context.load_cert_chain(self.certificate_chain, self.private_key)
        return context


@dataclass(frozen=True)
class WireRequest:
    """One request as bytes: the HTTP body and headers, or the serialized ModelInferRequest."""

    body: bytes
    headers: dict[str, str]


def encode_requests(
    protocol: str,
    model: str,
    version: str,
    samples: Sequence[Sample],
    datatypes: Mapping[str, str],
    outputs: Sequence[str] | None = None,
) -> list[WireRequest]:
    """Encode every sample once, with the SDK's request builders (binary tensors over HTTP)."""
    encoded = []
    for sample in samples:
        if protocol == "http":
            call = _HttpBase._infer_call(
                model, sample, outputs, version, "", None, datatypes, True, None, None, None, None
            )
            encoded.append(WireRequest(call.content or b"", dict(call.headers)))
        else:
            message = _infer_request(model, sample, outputs, version, "", None, datatypes, None)
            encoded.append(WireRequest(message.SerializeToString(), {}))
    return encoded


class Sender(Protocol):
    """Sends one pre-encoded request; returns None on success or the error's text."""

    async def send(self, request: WireRequest) -> str | None: ...

    async def close(self) -> None: ...


class RawHttpSender:
    """HTTP through pre-built request bytes and httptools (see rawhttp.py): the cheapest path."""

    def __init__(self, url: str, path: str, security: Security) -> None:
        from .rawhttp import RawHttpClient

        self._client = RawHttpClient(url, path, security.ssl_context())
        self._headers = dict(security.headers)
        self._built: dict[int, bytes] = {}

    async def send(self, request: WireRequest) -> str | None:
        key = id(request)
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = self._client.build(request.body, {**self._headers, **request.headers})
        try:
            status, body = await self._client.post(built)
        except Exception as exc:  # noqa: BLE001 - any transport failure is a failed request to report
            return f"{type(exc).__name__}: {exc}"
        return None if status == 200 else f"HTTP {status}: {_error_text(body)}"

    async def close(self) -> None:
        await self._client.close()


class AiohttpSender:
    def __init__(self, url: str, path: str, connections: int, security: Security) -> None:
        import aiohttp

        self._url = url.rstrip("/") + path
        self._headers = {"Accept-Encoding": "identity", **security.headers}  # aiohttp asks for gzip otherwise
        context = security.ssl_context()
        connector = aiohttp.TCPConnector(limit=connections, ssl=context if context is not None else False)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))

    async def send(self, request: WireRequest) -> str | None:
        try:
            async with self._session.post(
                self._url, data=request.body, headers={**self._headers, **request.headers}
            ) as response:
                body = await response.read()
                if response.status == 200:
                    return None
                return f"HTTP {response.status}: {_error_text(body)}"
        except Exception as exc:  # noqa: BLE001 - any transport failure is a failed request to report
            return f"{type(exc).__name__}: {exc}"

    async def close(self) -> None:
        await self._session.close()


class HttpxSender:
    """Fallback when aiohttp is missing: correct, but slower under concurrency."""

    def __init__(self, url: str, path: str, connections: int, security: Security) -> None:
        import httpx

        context = security.ssl_context()
        self._path = path
        self._client = httpx.AsyncClient(
            base_url=url,
            headers={"Accept-Encoding": "identity", **security.headers},  # httpx asks for gzip otherwise
            timeout=None,
            verify=context if context is not None else True,
            limits=httpx.Limits(max_connections=connections),
        )

    async def send(self, request: WireRequest) -> str | None:
        try:
            response = await self._client.post(self._path, content=request.body, headers=request.headers)
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"
        if response.status_code == 200:
            return None
        return f"HTTP {response.status_code}: {_error_text(response.content)}"

    async def close(self) -> None:
        await self._client.aclose()


class GrpcSender:
    def __init__(self, url: str, security: Security, max_message_bytes: int = 256 * 1024 * 1024) -> None:
        import grpc
        import grpc.aio

        options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.enable_retries", 0),
        ]  # a load generator reports failures, it does not hide them
        if security.ssl or security.root_certificates or security.certificate_chain:
            credentials = grpc.ssl_channel_credentials(
                security.file_bytes(security.root_certificates),
                security.file_bytes(security.private_key),
                security.file_bytes(security.certificate_chain),
            )
            self._channel = grpc.aio.secure_channel(url, credentials, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(url, options=options)
        self._metadata = tuple((k.lower(), v) for k, v in security.headers.items())
        self._call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(
            GRPC_INFER_METHOD
        )  # bytes in, bytes out
        self._rpc_error = grpc.aio.AioRpcError

    async def send(self, request: WireRequest) -> str | None:
        try:
            await self._call(request.body, metadata=self._metadata)
        except self._rpc_error as exc:
            return f"{exc.code().name}: {exc.details()}"
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"
        return None

    async def close(self) -> None:
        await self._channel.close()


class RawGrpcSender:
    """gRPC as pre-built HTTP/2 frames (see rawgrpc.py): about a third of grpcio's CPU per call."""

    def __init__(self, url: str, security: Security) -> None:
        from .rawgrpc import PreparedCall, RawGrpcClient

        host, _, port = url.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"gRPC address '{url}': expected HOST:PORT")
        self._client = RawGrpcClient(
            host.strip("[]"), int(port), GRPC_INFER_METHOD, list(security.headers.items()), security.ssl_context()
        )
        self._prepare = PreparedCall.of
        self._prepared: dict[int, PreparedCall] = {}

    async def send(self, request: WireRequest) -> str | None:
        prepared = self._prepared.get(id(request))
        if prepared is None:
            prepared = self._prepared[id(request)] = self._prepare(request.body)
        try:
            return (await self._client.call(prepared)).error
        except Exception as exc:  # noqa: BLE001 - any transport failure is a failed request to report
            return f"{type(exc).__name__}: {exc}"

    async def close(self) -> None:
        await self._client.close()


GRPC_ENGINES = ("raw", "grpcio")


def default_grpc_engine() -> str:
    """The raw HTTP/2 engine when hpack (the perf extra) is installed, else grpcio."""
    import importlib.util

    return "raw" if importlib.util.find_spec("hpack") is not None else "grpcio"


def make_sender(
    protocol: str,
    url: str,
    model: str,
    version: str,
    connections: int,
    security: Security,
    grpc_engine: str = "grpcio",
) -> Sender:
    """The sender for a protocol; HTTP prefers pre-built bytes (httptools), then aiohttp, then httpx;
    gRPC uses ``grpc_engine`` (one of GRPC_ENGINES)."""
    if protocol == "grpc":
        if grpc_engine not in GRPC_ENGINES:
            raise ValueError(f"unknown gRPC engine '{grpc_engine}' (choose from {', '.join(GRPC_ENGINES)})")
        return RawGrpcSender(url, security) if grpc_engine == "raw" else GrpcSender(url, security)
    from ..http import _model_path

    base = url if "://" in url else ("https://" if security.ssl_context() else "http://") + url
    path = _model_path(model, version) + "/infer"
    try:
        return RawHttpSender(base, path, security)
    except ImportError:
        pass
    try:
        return AiohttpSender(base, path, connections, security)
    except ImportError:
        return HttpxSender(base, path, connections, security)


def _error_text(body: bytes) -> str:
    """The server's ``{"error": ...}`` message, or the start of the body."""
    import json

    try:
        parsed: Any = json.loads(body)
        if isinstance(parsed, dict) and "error" in parsed:
            return str(parsed["error"])
    except ValueError:
        pass
    return body[:200].decode("utf-8", "replace")


def fast_http_available() -> bool:
    """Whether a fast HTTP path (httptools or aiohttp) is installed."""
    import importlib.util

    return any(importlib.util.find_spec(name) is not None for name in ("httptools", "aiohttp"))
