"""KServe V2 / Triton gRPC clients (sync and grpc.aio) with the same methods as the HTTP clients.

Metadata, config, statistics and index come back as the same dicts the REST API returns (proto
field names, int64 as numbers, defaults included), so code can switch protocols without change.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from .codec import CodecError, tensor_from_proto, tensor_to_bytes
from .codec.messages import message_to_dict, metadata_to_dict
from .codec.parameters import parameter_value, set_parameter
from .errors import (
    FerryClientError,
    InvalidArgumentError,
    NotFoundError,
    ServerError,
    error_from_grpc_code,
)
from .http import Compression, _backoff_delay, _prepare_input, _requested_outputs
from .protocol import grpc_service_pb2 as pb
from .protocol import grpc_service_pb2_grpc as pb_grpc
from .result import InferResult

__all__ = ["AsyncGrpcClient", "GrpcClient"]

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024

_COMPRESSION = {None: None, "gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}

# --- protobuf <-> Python -----------------------------------------------------------------------


def _set_parameter(parameter: pb.InferParameter, key: str, value: Any) -> None:
    try:
        set_parameter(parameter, key, value)
    except CodecError as exc:
        raise InvalidArgumentError(str(exc)) from None


def _infer_request(
    model: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None,
    model_version: str | int,
    request_id: str,
    parameters: Mapping[str, Any] | None,
    datatypes: Mapping[str, str] | None,
    classification: Mapping[str, int] | None,
) -> pb.ModelInferRequest:
    """Build a ModelInferRequest; inputs always travel as raw_input_contents."""
    request = pb.ModelInferRequest(model_name=model, model_version=str(model_version), id=request_id)
    for key, value in (parameters or {}).items():
        _set_parameter(request.parameters[key], key, value)
    for name, value in inputs.items():
        array, datatype = _prepare_input(name, value, datatypes)
        try:
            raw = tensor_to_bytes(array, datatype)
        except CodecError as exc:
            raise InvalidArgumentError(f"input '{name}': {exc}") from None
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        request.raw_input_contents.append(bytes(raw))
    for name, top_k in _requested_outputs(outputs, classification) or []:
        requested = request.outputs.add(name=name)
        if top_k:
            requested.parameters["classification"].int64_param = top_k
    return request


def _infer_result(response: pb.ModelInferResponse) -> InferResult:
    """Decode outputs from raw_output_contents, or from typed contents when the server used those."""
    raw = response.raw_output_contents
    if raw and len(raw) != len(response.outputs):
        raise ServerError(
            f"malformed inference response: {len(raw)} raw_output_contents for {len(response.outputs)} outputs"
        )
    outputs = {}
    datatypes = {}
    try:
        for index, tensor in enumerate(response.outputs):
            array = tensor_from_proto(tensor, raw, index)
            outputs[tensor.name] = array
            datatypes[tensor.name] = tensor.datatype
    except CodecError as exc:
        raise ServerError(f"malformed inference response: {exc}") from None
    return InferResult(
        model_name=response.model_name,
        model_version=response.model_version,
        outputs=outputs,
        datatypes=datatypes,
        id=response.id,
        parameters={key: parameter_value(value) for key, value in response.parameters.items()},
    )


def _load_request(model: str, config: str | Mapping[str, Any] | None) -> pb.RepositoryModelLoadRequest:
    request = pb.RepositoryModelLoadRequest(model_name=model)
    if config is not None:
        text = config if isinstance(config, str) else json.dumps(config)
        request.parameters["config"].string_param = text
    return request


def _rpc_error(exc: grpc.RpcError) -> FerryClientError:
    """The typed error for a failed call, carrying the server's message."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else None
    return error_from_grpc_code(code, details or (code.name if code is not None else str(exc)))


# --- the shared core ---------------------------------------------------------------------------


class _GrpcBase:
    """Channel settings, call metadata and retry policy common to both gRPC clients."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float | None = 60.0,
        headers: Mapping[str, str] | None = None,
        ssl: bool = False,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        bearer_token: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        for prefix, secure in (("grpcs://", True), ("https://", True), ("grpc://", False), ("http://", False)):
            if url.startswith(prefix):
                url = url[len(prefix) :]
                ssl = ssl or secure
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._rng = random.Random()
        metadata = [(key.lower(), value) for key, value in (headers or {}).items()]
        if bearer_token:
            metadata.append(("authorization", f"Bearer {bearer_token}"))
        self._metadata: tuple[tuple[str, str], ...] = tuple(metadata)
        self._options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            *channel_options,
        ]
        self._credentials: grpc.ChannelCredentials | None = None
        if ssl or root_certificates or private_key or certificate_chain:
            self._credentials = grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)

    def _call_kwargs(
        self, timeout: float | None, compression: Compression | None, headers: Mapping[str, str] | None
    ) -> dict[str, Any]:
        if compression not in _COMPRESSION:
            raise ValueError(f"unsupported compression {compression!r}; use 'gzip', 'deflate' or None")
        metadata = self._metadata + tuple((key.lower(), value) for key, value in (headers or {}).items())
        kwargs: dict[str, Any] = {"timeout": self.timeout if timeout is None else timeout, "metadata": metadata}
        if compression is not None:
            kwargs["compression"] = _COMPRESSION[compression]
        return kwargs

    def _retry_delay(self, attempt: int, error: FerryClientError) -> float | None:
        """Seconds before another attempt on UNAVAILABLE, or None when the error is final."""
        if attempt >= self.retries or error.grpc_code != grpc.StatusCode.UNAVAILABLE:
            return None
        return _backoff_delay(self._rng, attempt, self.backoff, self.max_backoff)


# --- sync --------------------------------------------------------------------------------------


class GrpcClient(_GrpcBase):
    """Synchronous client for ``inference.GRPCInferenceService``.

    ``url`` is ``host:port`` (``grpcs://`` or ``ssl=True`` or any certificate selects TLS).
    ``retries`` extra attempts are made on UNAVAILABLE with full-jitter exponential backoff.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float | None = 60.0,
        headers: Mapping[str, str] | None = None,
        ssl: bool = False,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        bearer_token: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        super().__init__(
            url,
            timeout=timeout,
            headers=headers,
            ssl=ssl,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            bearer_token=bearer_token,
            max_message_bytes=max_message_bytes,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            channel_options=channel_options,
        )
        if self._credentials is None:
            self._channel = grpc.insecure_channel(self.url, options=self._options)
        else:
            self._channel = grpc.secure_channel(self.url, self._credentials, options=self._options)
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(
        self,
        method: str,
        request: Message,
        timeout: float | None = None,
        compression: Compression | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Invoke one RPC with retries, turning RpcError into the typed errors."""
        rpc = getattr(self._stub, method)
        kwargs = self._call_kwargs(timeout, compression, headers)
        attempt = 0
        while True:
            try:
                return rpc(request, **kwargs)
            except grpc.RpcError as exc:
                error = _rpc_error(exc)
                delay = self._retry_delay(attempt, error)
                if delay is None:
                    raise error from exc
            time.sleep(delay)
            attempt += 1

    def is_server_live(self) -> bool:
        """ServerLive."""
        return bool(self._call("ServerLive", pb.ServerLiveRequest()).live)

    def is_server_ready(self) -> bool:
        """ServerReady."""
        return bool(self._call("ServerReady", pb.ServerReadyRequest()).ready)

    def is_model_ready(self, model: str, version: str | int = "") -> bool:
        """ModelReady; an unknown model is simply not ready, as over REST."""
        try:
            return bool(self._call("ModelReady", pb.ModelReadyRequest(name=model, version=str(version))).ready)
        except (NotFoundError, InvalidArgumentError):
            return False

    def server_metadata(self) -> dict[str, Any]:
        """ServerMetadata as a dict: name, version, extensions."""
        return message_to_dict(self._call("ServerMetadata", pb.ServerMetadataRequest()))

    def model_metadata(self, model: str, version: str | int = "") -> dict[str, Any]:
        """ModelMetadata as a dict."""
        return metadata_to_dict(self._call("ModelMetadata", pb.ModelMetadataRequest(name=model, version=str(version))))

    def model_config(self, model: str, version: str | int = "") -> dict[str, Any]:
        """ModelConfig: the ``config`` field as a dict, as REST returns it."""
        response = self._call("ModelConfig", pb.ModelConfigRequest(name=model, version=str(version)))
        return message_to_dict(response.config)

    def model_statistics(self, model: str = "", version: str | int = "") -> dict[str, Any]:
        """ModelStatistics as ``{"model_stats": [...]}``."""
        request = pb.ModelStatisticsRequest(name=model, version=str(version))
        return message_to_dict(self._call("ModelStatistics", request))

    def repository_index(self, ready: bool = False) -> list[dict[str, Any]]:
        """RepositoryIndex as a list of ``{name, version, state, reason}``."""
        response = self._call("RepositoryIndex", pb.RepositoryIndexRequest(ready=ready))
        return message_to_dict(response).get("models", [])

    def load_model(self, model: str, config: str | Mapping[str, Any] | None = None) -> None:
        """RepositoryModelLoad, optionally overriding the config (JSON text or dict)."""
        self._call("RepositoryModelLoad", _load_request(model, config))

    def unload_model(self, model: str) -> None:
        """RepositoryModelUnload."""
        self._call("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name=model))

    def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        *,
        model_version: str | int = "",
        request_id: str = "",
        parameters: Mapping[str, Any] | None = None,
        datatypes: Mapping[str, str] | None = None,
        binary: bool = True,
        timeout: float | None = None,
        compression: Compression | None = None,
        classification: Mapping[str, int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> InferResult:
        """ModelInfer; arguments as :meth:`ferry_client.HttpClient.infer` (``binary`` is accepted for
        parity and ignored: gRPC tensors are always binary)."""
        del binary
        request = _infer_request(
            model, inputs, outputs, model_version, request_id, parameters, datatypes, classification
        )
        return _infer_result(self._call("ModelInfer", request, timeout, compression, headers))


# --- asyncio -----------------------------------------------------------------------------------


class AsyncGrpcClient(_GrpcBase):
    """grpc.aio client with the same methods as :class:`GrpcClient`, awaited.

    The channel is opened on first use, inside the running event loop it will serve.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float | None = 60.0,
        headers: Mapping[str, str] | None = None,
        ssl: bool = False,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        bearer_token: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        super().__init__(
            url,
            timeout=timeout,
            headers=headers,
            ssl=ssl,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            bearer_token=bearer_token,
            max_message_bytes=max_message_bytes,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            channel_options=channel_options,
        )
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.GRPCInferenceServiceStub | None = None

    def _get_stub(self) -> pb_grpc.GRPCInferenceServiceStub:
        if self._stub is None:
            if self._credentials is None:
                self._channel = grpc.aio.insecure_channel(self.url, options=self._options)
            else:
                self._channel = grpc.aio.secure_channel(self.url, self._credentials, options=self._options)
            self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        return self._stub

    async def close(self) -> None:
        """Close the channel (if one was opened)."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None

    async def __aenter__(self) -> AsyncGrpcClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _call(
        self,
        method: str,
        request: Message,
        timeout: float | None = None,
        compression: Compression | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Invoke one RPC with retries, turning RpcError into the typed errors."""
        rpc = getattr(self._get_stub(), method)
        kwargs = self._call_kwargs(timeout, compression, headers)
        attempt = 0
        while True:
            try:
                return await rpc(request, **kwargs)
            except grpc.RpcError as exc:
                error = _rpc_error(exc)
                delay = self._retry_delay(attempt, error)
                if delay is None:
                    raise error from exc
            await asyncio.sleep(delay)
            attempt += 1

    async def is_server_live(self) -> bool:
        """ServerLive."""
        return bool((await self._call("ServerLive", pb.ServerLiveRequest())).live)

    async def is_server_ready(self) -> bool:
        """ServerReady."""
        return bool((await self._call("ServerReady", pb.ServerReadyRequest())).ready)

    async def is_model_ready(self, model: str, version: str | int = "") -> bool:
        """ModelReady; an unknown model is simply not ready, as over REST."""
        try:
            response = await self._call("ModelReady", pb.ModelReadyRequest(name=model, version=str(version)))
        except (NotFoundError, InvalidArgumentError):
            return False
        return bool(response.ready)

    async def server_metadata(self) -> dict[str, Any]:
        """ServerMetadata as a dict."""
        return message_to_dict(await self._call("ServerMetadata", pb.ServerMetadataRequest()))

    async def model_metadata(self, model: str, version: str | int = "") -> dict[str, Any]:
        """ModelMetadata as a dict."""
        request = pb.ModelMetadataRequest(name=model, version=str(version))
        return metadata_to_dict(await self._call("ModelMetadata", request))

    async def model_config(self, model: str, version: str | int = "") -> dict[str, Any]:
        """ModelConfig: the ``config`` field as a dict."""
        response = await self._call("ModelConfig", pb.ModelConfigRequest(name=model, version=str(version)))
        return message_to_dict(response.config)

    async def model_statistics(self, model: str = "", version: str | int = "") -> dict[str, Any]:
        """ModelStatistics as ``{"model_stats": [...]}``."""
        request = pb.ModelStatisticsRequest(name=model, version=str(version))
        return message_to_dict(await self._call("ModelStatistics", request))

    async def repository_index(self, ready: bool = False) -> list[dict[str, Any]]:
        """RepositoryIndex as a list of ``{name, version, state, reason}``."""
        response = await self._call("RepositoryIndex", pb.RepositoryIndexRequest(ready=ready))
        return message_to_dict(response).get("models", [])

    async def load_model(self, model: str, config: str | Mapping[str, Any] | None = None) -> None:
        """RepositoryModelLoad."""
        await self._call("RepositoryModelLoad", _load_request(model, config))

    async def unload_model(self, model: str) -> None:
        """RepositoryModelUnload."""
        await self._call("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name=model))

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        *,
        model_version: str | int = "",
        request_id: str = "",
        parameters: Mapping[str, Any] | None = None,
        datatypes: Mapping[str, str] | None = None,
        binary: bool = True,
        timeout: float | None = None,
        compression: Compression | None = None,
        classification: Mapping[str, int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> InferResult:
        """ModelInfer; see :meth:`GrpcClient.infer`."""
        del binary
        request = _infer_request(
            model, inputs, outputs, model_version, request_id, parameters, datatypes, classification
        )
        return _infer_result(await self._call("ModelInfer", request, timeout, compression, headers))
