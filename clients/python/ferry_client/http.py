"""KServe V2 REST clients (sync and asyncio) built on httpx, with the binary tensor extension.

Both clients share one set of request builders and response parsers; only the I/O differs, so
the two can never disagree about what goes on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import random
import ssl as _ssl
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx
import numpy as np

from .codec import (
    HEADER_LENGTH,
    CodecError,
    bf16_to_float32,
    check_datatype,
    float32_to_bf16,
    join_body,
    loads_json,
    numpy_dtype,
    read_tensors,
    split_body,
    v2_datatype,
    write_tensor,
)
from .errors import (
    DeadlineExceededError,
    FerryClientError,
    InvalidArgumentError,
    ServerError,
    UnavailableError,
    error_from_http_status,
)
from .images import (
    Classification,
    Detection,
    ImageLike,
    TextLine,
    image_call_parts,
    many,
    parse_classifications,
    parse_detections,
    parse_embeddings,
    parse_text_lines,
    query,
)
from .result import InferResult

__all__ = ["AsyncHttpClient", "HttpClient"]

Compression = Literal["gzip", "deflate"]

#: Failures where the server may simply not have been reachable yet; worth another attempt.
_RETRYABLE_TRANSPORT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)

_DEFAULT = httpx.USE_CLIENT_DEFAULT


# --- helpers shared with the gRPC client -------------------------------------------------------


def _prepare_input(name: str, value: Any, datatypes: Mapping[str, str] | None) -> tuple[np.ndarray, str]:
    """Turn a caller's value into the array and V2 datatype to send.

    An override in ``datatypes`` wins over the array's dtype; values are cast to it only when the
    cast keeps their kind (int64 -> INT32 is fine, float -> INT32 is refused), and float values
    sent as BF16 are rounded to bfloat16 bit patterns here (``ml_dtypes.bfloat16`` arrays go as BF16).
    """
    array = np.asarray(value)
    override = (datatypes or {}).get(name)
    if array.dtype.name == "bfloat16" and array.dtype.itemsize == 2:  # ml_dtypes.bfloat16, as tritonclient uses
        if override in (None, "", "BF16"):
            return array.view(np.uint16), "BF16"
        array = bf16_to_float32(array.view(np.uint16))
    try:
        datatype = override or v2_datatype(array.dtype)
        check_datatype(datatype)
    except CodecError as exc:
        raise InvalidArgumentError(f"input '{name}': {exc}") from None
    if datatype == "BYTES":
        return array, datatype
    if datatype == "BF16":
        if array.dtype == np.uint16:  # already bit patterns
            return array, datatype
        if array.dtype.kind not in "fiu":
            raise InvalidArgumentError(f"input '{name}': cannot send {array.dtype} values as BF16")
        return float32_to_bf16(array.astype(np.float32)), datatype
    target = numpy_dtype(datatype)
    if array.dtype != target:
        try:
            array = array.astype(target, casting="same_kind")
        except TypeError:
            raise InvalidArgumentError(f"input '{name}': cannot send {array.dtype} values as {datatype}") from None
    return array, datatype


def _backoff_delay(rng: random.Random, attempt: int, base: float, cap: float) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return rng.uniform(0.0, min(cap, base * (2**attempt)))


def _model_path(model: str, version: str | int = "") -> str:
    """``/v2/models/{model}[/versions/{version}]`` with both parts URL-escaped."""
    path = f"/v2/models/{quote(model, safe='')}"
    if str(version):
        path += f"/versions/{quote(str(version), safe='')}"
    return path


def _compress(body: bytes, compression: Compression | None) -> bytes:
    """Compress a request body; deflate means the zlib format, as Triton and Ferry expect."""
    if compression is None:
        return body
    if compression == "gzip":
        return gzip.compress(body)
    if compression == "deflate":
        return zlib.compress(body)
    raise ValueError(f"unsupported compression {compression!r}; use 'gzip', 'deflate' or None")


def _tls(
    ssl_context: _ssl.SSLContext | None, verify: bool | str, cert: str | tuple[str, str] | None
) -> _ssl.SSLContext | bool:
    """Build the ``verify`` value for httpx, as an SSLContext when CA or client certs are files."""
    if ssl_context is not None:
        return ssl_context
    if not isinstance(verify, str) and cert is None:
        return verify
    context = _ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
    if verify is False:
        context.check_hostname = False
        context.verify_mode = _ssl.CERT_NONE
    if cert is not None:
        certfile, keyfile = (cert, None) if isinstance(cert, str) else cert
        context.load_cert_chain(certfile, keyfile)
    return context


def _error_message(response: httpx.Response) -> str:
    """The server's ``{"error": ...}`` text, or whatever the body says when it is not that."""
    try:
        parsed = json.loads(response.content)
    except (ValueError, UnicodeDecodeError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        return parsed["error"]
    text = response.content.decode("utf-8", "replace").strip()
    return text or response.reason_phrase or f"HTTP {response.status_code}"


def _check(response: httpx.Response) -> httpx.Response:
    """Raise the typed error for a non-2xx response."""
    if not response.is_success:
        raise error_from_http_status(response.status_code, _error_message(response))
    return response


def _json(response: httpx.Response) -> Any:
    """The JSON body of a successful response."""
    _check(response)
    try:
        return loads_json(response.content, "response body")
    except CodecError as exc:
        raise ServerError(str(exc), status=response.status_code) from None


def _ready(response: httpx.Response) -> bool:
    """Health answers: 200 is yes, anything else is no, except auth failures, which are errors."""
    if response.status_code in (401, 403):
        _check(response)
    return response.status_code == 200


def _none(response: httpx.Response) -> None:
    _check(response)


def _infer_result(response: httpx.Response) -> InferResult:
    """Decode a V2 inference response, JSON only or JSON followed by binary outputs."""
    _check(response)
    try:
        header, blob = split_body(response.content, response.headers.get(HEADER_LENGTH), "response body")
        decoded = read_tensors(header.get("outputs", []), blob, "outputs")
    except CodecError as exc:
        raise ServerError(f"malformed inference response: {exc}", status=response.status_code) from None
    outputs = {entry["name"]: array for entry, array in decoded}
    datatypes = {entry["name"]: entry["datatype"] for entry, _ in decoded}
    return InferResult(
        model_name=str(header.get("model_name", "")),
        model_version=str(header.get("model_version", "")),
        outputs=outputs,
        datatypes=datatypes,
        id=str(header.get("id", "")),
        parameters=header.get("parameters") or {},
    )


@dataclass
class _Call:
    """One HTTP exchange to make, independent of sync or async I/O."""

    method: str
    path: str
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: Any = _DEFAULT
    retry_unavailable: bool = True  # health checks: a 503 is the answer, not a reason to retry
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None  # multipart fields


def _json_call(path: str, body: Any) -> _Call:
    return _Call("POST", path, json.dumps(body).encode("utf-8"), {"Content-Type": "application/json"})


# --- the shared core ---------------------------------------------------------------------------


class _HttpBase:
    """Configuration, request builders and retry policy common to both HTTP clients."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float | None = 60.0,
        headers: Mapping[str, str] | None = None,
        ssl_context: _ssl.SSLContext | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        bearer_token: str | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        trust_env: bool = False,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        secure = ssl_context is not None or isinstance(verify, str) or cert is not None
        if "://" not in url:
            url = ("https://" if secure else "http://") + url
        self.url = url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._rng = random.Random()
        # httpx asks for gzip by default; the server would then compress every response (CPU on both
        # ends for tensors that rarely shrink). Callers who want compression pass Accept-Encoding.
        all_headers = {"Accept-Encoding": "identity", **(headers or {})}
        if bearer_token:
            all_headers["Authorization"] = f"Bearer {bearer_token}"
        self._client_options: dict[str, Any] = {
            "base_url": self.url,
            "timeout": httpx.Timeout(timeout),
            "headers": all_headers,
            "verify": _tls(ssl_context, verify, cert),
            "trust_env": trust_env,
        }

    # retry policy

    def _retry_delay(self, call: _Call, attempt: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before another attempt, or None when this outcome is final."""
        if attempt >= self.retries:
            return None
        if response is not None and (response.status_code != 503 or not call.retry_unavailable):
            return None
        delay = _backoff_delay(self._rng, attempt, self.backoff, self.max_backoff)
        retry_after = response.headers.get("Retry-After") if response is not None else None
        if retry_after is not None:
            with contextlib.suppress(ValueError):
                delay = min(self.max_backoff, max(delay, float(retry_after)))
        return delay

    def _transport_error(self, exc: httpx.HTTPError) -> FerryClientError:
        """The typed error for a failure with no HTTP response; it names the address tried."""
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return DeadlineExceededError(f"request timed out: {exc or type(exc).__name__}")
        if isinstance(exc, (*_RETRYABLE_TRANSPORT, httpx.NetworkError)):
            return UnavailableError(f"cannot reach the server at {self.url}: {exc or type(exc).__name__}")
        return FerryClientError(f"HTTP request failed: {exc or type(exc).__name__}")

    # request builders

    @staticmethod
    def _stats_path(model: str, version: str | int) -> str:
        if not model:
            if str(version):
                raise ValueError("a version needs a model name")
            return "/v2/models/stats"
        return _model_path(model, version) + "/stats"

    @staticmethod
    def _load_call(model: str, config: str | Mapping[str, Any] | None) -> _Call:
        body: dict[str, Any] = {}
        if config is not None:
            text = config if isinstance(config, str) else json.dumps(config)
            body["parameters"] = {"config": text}
        return _json_call(f"/v2/repository/models/{quote(model, safe='')}/load", body)

    @staticmethod
    def _image_call(
        task: str, model: str, version: str | int, images: list[bytes], options: dict[str, Any], timeout: float | None
    ) -> _Call:
        """POST one image as the raw body, or several as multipart, to /classify, /detect, /embed or /recognize."""
        content, files = image_call_parts(images)
        headers = {"Content-Type": "application/octet-stream"} if files is None else {}
        return _Call(
            "POST",
            _model_path(model, version) + f"/{task}" + query(options),
            content,
            headers,
            _DEFAULT if timeout is None else timeout,
            files=files,
        )

    @staticmethod
    def _infer_call(
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None,
        model_version: str | int,
        request_id: str,
        parameters: Mapping[str, Any] | None,
        datatypes: Mapping[str, str] | None,
        binary: bool,
        timeout: float | None | object,
        compression: Compression | None,
        classification: Mapping[str, int] | None,
        headers: Mapping[str, str] | None,
    ) -> _Call:
        """Build the V2 JSON (+ binary) request body and its headers."""
        blobs: list[bytes | memoryview] = []
        entries = []
        for name, value in inputs.items():
            array, datatype = _prepare_input(name, value, datatypes)
            try:
                entries.append(write_tensor(name, array, datatype, binary, blobs))
            except CodecError as exc:
                raise InvalidArgumentError(f"input '{name}': {exc}") from None
        header: dict[str, Any] = {}
        if request_id:
            header["id"] = request_id
        params = dict(parameters or {})
        wanted = _requested_outputs(outputs, classification)
        if wanted is None:
            if binary:
                params["binary_data_output"] = True
        else:
            header["outputs"] = [
                {"name": name, "parameters": {"binary_data": binary, **({"classification": k} if k else {})}}
                for name, k in wanted
            ]
        if params:
            header["parameters"] = params
        header["inputs"] = entries
        body, header_length = join_body(header, blobs)
        call_headers = dict(headers or {})
        if header_length is None:
            call_headers["Content-Type"] = "application/json"
        else:
            call_headers["Content-Type"] = "application/octet-stream"
            call_headers[HEADER_LENGTH] = str(header_length)
        if compression is not None:
            body = _compress(body, compression)
            call_headers["Content-Encoding"] = compression
        return _Call(
            "POST",
            _model_path(model, model_version) + "/infer",
            body,
            call_headers,
            _DEFAULT if timeout is None else timeout,
        )


def _requested_outputs(
    outputs: Sequence[str] | None, classification: Mapping[str, int] | None
) -> list[tuple[str, int]] | None:
    """Names to request with their top-k; classified outputs are requested even when not listed."""
    if isinstance(outputs, str):
        outputs = [outputs]
    if outputs is None and not classification:
        return None
    names = list(outputs or [])
    names += [name for name in (classification or {}) if name not in names]
    return [(name, int((classification or {}).get(name, 0))) for name in names]


# --- sync --------------------------------------------------------------------------------------


class HttpClient(_HttpBase):
    """Synchronous KServe V2 REST client.

    ``url`` is ``host:port`` or a full ``http(s)://`` URL. ``retries`` extra attempts are made on
    503 and on connection failures, waiting with full-jitter exponential backoff (``backoff``
    seconds doubling per attempt, capped at ``max_backoff``). Use as a context manager or call
    :meth:`close`.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float | None = 60.0,
        headers: Mapping[str, str] | None = None,
        ssl_context: _ssl.SSLContext | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        bearer_token: str | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        trust_env: bool = False,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            url,
            timeout=timeout,
            headers=headers,
            ssl_context=ssl_context,
            verify=verify,
            cert=cert,
            bearer_token=bearer_token,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            trust_env=trust_env,
        )
        self._client = httpx.Client(transport=transport, **self._client_options)

    def close(self) -> None:
        """Close pooled connections."""
        self._client.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, call: _Call) -> httpx.Response:
        """Make the exchange, retrying per the policy; raises typed errors for transport failures."""
        attempt = 0
        while True:
            try:
                response = self._client.request(
                    call.method,
                    call.path,
                    content=call.content,
                    headers=call.headers,
                    timeout=call.timeout,
                    files=call.files,
                )
            except _RETRYABLE_TRANSPORT as exc:
                delay = self._retry_delay(call, attempt, None)
                if delay is None:
                    raise self._transport_error(exc) from exc
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from exc
            else:
                delay = self._retry_delay(call, attempt, response)
                if delay is None:
                    return response
            time.sleep(delay)
            attempt += 1

    # health

    def is_server_live(self) -> bool:
        """GET /v2/health/live."""
        return _ready(self._send(_Call("GET", "/v2/health/live", retry_unavailable=False)))

    def is_server_ready(self) -> bool:
        """GET /v2/health/ready."""
        return _ready(self._send(_Call("GET", "/v2/health/ready", retry_unavailable=False)))

    def is_model_ready(self, model: str, version: str | int = "") -> bool:
        """GET /v2/models/{model}[/versions/{version}]/ready; an unknown model is simply not ready."""
        return _ready(self._send(_Call("GET", _model_path(model, version) + "/ready", retry_unavailable=False)))

    # metadata

    def server_metadata(self) -> dict[str, Any]:
        """GET /v2: name, version, extensions."""
        return _json(self._send(_Call("GET", "/v2")))

    def model_metadata(self, model: str, version: str | int = "") -> dict[str, Any]:
        """GET /v2/models/{model}[/versions/{version}]: inputs, outputs, versions, platform."""
        return _json(self._send(_Call("GET", _model_path(model, version))))

    def model_config(self, model: str, version: str | int = "") -> dict[str, Any]:
        """GET /v2/models/{model}[/versions/{version}]/config: the model configuration as JSON."""
        return _json(self._send(_Call("GET", _model_path(model, version) + "/config")))

    def model_statistics(self, model: str = "", version: str | int = "") -> dict[str, Any]:
        """GET /v2/models[/{model}[/versions/{version}]]/stats: ``{"model_stats": [...]}``."""
        return _json(self._send(_Call("GET", self._stats_path(model, version))))

    # repository

    def repository_index(self, ready: bool = False) -> list[dict[str, Any]]:
        """POST /v2/repository/index: every model version with its state (only ready ones if asked)."""
        return _json(self._send(_json_call("/v2/repository/index", {"ready": True} if ready else {})))

    def load_model(self, model: str, config: str | Mapping[str, Any] | None = None) -> None:
        """POST /v2/repository/models/{model}/load, optionally overriding the config (JSON text or dict)."""
        _none(self._send(self._load_call(model, config)))

    def unload_model(self, model: str) -> None:
        """POST /v2/repository/models/{model}/unload."""
        _none(self._send(_json_call(f"/v2/repository/models/{quote(model, safe='')}/unload", {})))

    # images

    def classify(
        self,
        model: str,
        images: ImageLike | Sequence[ImageLike],
        *,
        top_k: int | None = None,
        model_version: str | int = "",
        timeout: float | None = None,
    ) -> list[Classification] | list[list[Classification]]:
        """POST /classify: top-k classes of one image (a list) or of several (a list per image).

        Images are paths, encoded bytes or PIL images; the server decodes and pre-processes them
        with the model's own pipeline, and scores are what that pipeline reports (softmax if set).
        """
        encoded, single = many(images)
        call = self._image_call("classify", model, model_version, encoded, {"top_k": top_k}, timeout)
        results = parse_classifications(_json(self._send(call)))
        return results[0] if single else results

    def detect(
        self,
        model: str,
        images: ImageLike | Sequence[ImageLike],
        *,
        score_threshold: float | None = None,
        iou_threshold: float | None = None,
        max_detections: int | None = None,
        model_version: str | int = "",
        timeout: float | None = None,
    ) -> list[Detection] | list[list[Detection]]:
        """POST /detect: boxes (x1, y1, x2, y2) in original pixels, scores and labels, per image."""
        encoded, single = many(images)
        options = {"score_threshold": score_threshold, "iou_threshold": iou_threshold, "max_detections": max_detections}
        call = self._image_call("detect", model, model_version, encoded, options, timeout)
        results = parse_detections(_json(self._send(call)))
        return results[0] if single else results

    def embed(
        self,
        model: str,
        images: ImageLike | Sequence[ImageLike],
        *,
        model_version: str | int = "",
        timeout: float | None = None,
    ) -> np.ndarray | list[np.ndarray]:
        """POST /embed: one float32 vector per image (pooled and normalised as the model's
        ``ferry_image.embedding`` says); one array for one image, a list for several."""
        encoded, single = many(images)
        call = self._image_call("embed", model, model_version, encoded, {}, timeout)
        results = parse_embeddings(_json(self._send(call)))
        return results[0] if single else results

    def recognize(
        self,
        model: str,
        images: ImageLike | Sequence[ImageLike],
        *,
        model_version: str | int = "",
        timeout: float | None = None,
    ) -> TextLine | list[TextLine]:
        """POST /recognize: the text and confidence a CTC recogniser reads in each line image."""
        encoded, single = many(images)
        call = self._image_call("recognize", model, model_version, encoded, {}, timeout)
        results = parse_text_lines(_json(self._send(call)))
        return results[0] if single else results

    # inference

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
        """POST /v2/models/{model}[/versions/{version}]/infer.

        ``inputs`` maps names to arrays (V2 datatype from the dtype unless ``datatypes`` overrides
        it); ``outputs`` limits which outputs come back (all when None); ``binary`` selects the
        binary tensor extension for inputs and outputs, JSON otherwise; ``classification`` asks
        for top-k class strings of the named outputs.
        """
        call = self._infer_call(
            model,
            inputs,
            outputs,
            model_version,
            request_id,
            parameters,
            datatypes,
            binary,
            timeout,
            compression,
            classification,
            headers,
        )
        return _infer_result(self._send(call))


# --- asyncio -----------------------------------------------------------------------------------


class AsyncHttpClient(_HttpBase):
    """Asyncio KServe V2 REST client; the same methods as :class:`HttpClient`, awaited."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float | None = 60.0,
        headers: Mapping[str, str] | None = None,
        ssl_context: _ssl.SSLContext | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        bearer_token: str | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        trust_env: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            url,
            timeout=timeout,
            headers=headers,
            ssl_context=ssl_context,
            verify=verify,
            cert=cert,
            bearer_token=bearer_token,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            trust_env=trust_env,
        )
        self._client = httpx.AsyncClient(transport=transport, **self._client_options)

    async def close(self) -> None:
        """Close pooled connections."""
        await self._client.aclose()

    async def __aenter__(self) -> AsyncHttpClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _send(self, call: _Call) -> httpx.Response:
        """Make the exchange, retrying per the policy; raises typed errors for transport failures."""
        attempt = 0
        while True:
            try:
                response = await self._client.request(
                    call.method,
                    call.path,
                    content=call.content,
                    headers=call.headers,
                    timeout=call.timeout,
                    files=call.files,
                )
            except _RETRYABLE_TRANSPORT as exc:
                delay = self._retry_delay(call, attempt, None)
                if delay is None:
                    raise self._transport_error(exc) from exc
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from exc
            else:
                delay = self._retry_delay(call, attempt, response)
                if delay is None:
                    return response
            await asyncio.sleep(delay)
            attempt += 1

    async def is_server_live(self) -> bool:
        """GET /v2/health/live."""
        return _ready(await self._send(_Call("GET", "/v2/health/live", retry_unavailable=False)))

    async def is_server_ready(self) -> bool:
        """GET /v2/health/ready."""
        return _ready(await self._send(_Call("GET", "/v2/health/ready", retry_unavailable=False)))

    async def is_model_ready(self, model: str, version: str | int = "") -> bool:
        """GET /v2/models/{model}[/versions/{version}]/ready; an unknown model is simply not ready."""
        return _ready(await self._send(_Call("GET", _model_path(model, version) + "/ready", retry_unavailable=False)))

    async def server_metadata(self) -> dict[str, Any]:
        """GET /v2: name, version, extensions."""
        return _json(await self._send(_Call("GET", "/v2")))

    async def model_metadata(self, model: str, version: str | int = "") -> dict[str, Any]:
        """GET /v2/models/{model}[/versions/{version}]."""
        return _json(await self._send(_Call("GET", _model_path(model, version))))

    async def model_config(self, model: str, version: str | int = "") -> dict[str, Any]:
        """GET /v2/models/{model}[/versions/{version}]/config."""
        return _json(await self._send(_Call("GET", _model_path(model, version) + "/config")))

    async def model_statistics(self, model: str = "", version: str | int = "") -> dict[str, Any]:
        """GET /v2/models[/{model}[/versions/{version}]]/stats."""
        return _json(await self._send(_Call("GET", self._stats_path(model, version))))

    async def repository_index(self, ready: bool = False) -> list[dict[str, Any]]:
        """POST /v2/repository/index."""
        return _json(await self._send(_json_call("/v2/repository/index", {"ready": True} if ready else {})))

    async def load_model(self, model: str, config: str | Mapping[str, Any] | None = None) -> None:
        """POST /v2/repository/models/{model}/load."""
        _none(await self._send(self._load_call(model, config)))

    async def unload_model(self, model: str) -> None:
        """POST /v2/repository/models/{model}/unload."""
        _none(await self._send(_json_call(f"/v2/repository/models/{quote(model, safe='')}/unload", {})))

    # images

    async def classify(
        self,
        model: str,
        images: ImageLike | Sequence[ImageLike],
        *,
        top_k: int | None = None,
        model_version: str | int = "",
        timeout: float | None = None,
    ) -> list[Classification] | list[list[Classification]]:
        """POST /classify: top-k classes of one image (a list) or of several (a list per image).

        Images are paths, encoded bytes or PIL images; the server decodes and pre-processes them
        with the model's own pipeline, and scores are what that pipeline reports (softmax if set).
        """
        encoded, single = many(images)
        call = self._image_call("classify", model, model_version, encoded, {"top_k": top_k}, timeout)
        results = parse_classifications(_json(await self._send(call)))
        return results[0] if single else results

    async def detect(
        self,
        model: str,
        images: ImageLike | Sequence[ImageLike],
        *,
        score_threshold: float | None = None,
        iou_threshold: float | None = None,
        max_detections: int | None = None,
        model_version: str | int = "",
        timeout: float | None = None,
    ) -> list[Detection] | list[list[Detection]]:
        """POST /detect: boxes (x1, y1, x2, y2) in original pixels, scores and labels, per image."""
        encoded, single = many(images)
        options = {"score_threshold": score_threshold, "iou_threshold": iou_threshold, "max_detections": max_detections}
        call = self._image_call("detect", model, model_version, encoded, options, timeout)
        results = parse_detections(_json(await self._send(call)))
        return results[0] if single else results

    async def embed(
        self,
        model: str,
        images: ImageLike | Sequence[ImageLike],
        *,
        model_version: str | int = "",
        timeout: float | None = None,
    ) -> np.ndarray | list[np.ndarray]:
        """POST /embed: one float32 vector per image (pooled and normalised as the model's
        ``ferry_image.embedding`` says); one array for one image, a list for several."""
        encoded, single = many(images)
        call = self._image_call("embed", model, model_version, encoded, {}, timeout)
        results = parse_embeddings(_json(await self._send(call)))
        return results[0] if single else results

    async def recognize(
        self,
        model: str,
        images: ImageLike | Sequence[ImageLike],
        *,
        model_version: str | int = "",
        timeout: float | None = None,
    ) -> TextLine | list[TextLine]:
        """POST /recognize: the text and confidence a CTC recogniser reads in each line image."""
        encoded, single = many(images)
        call = self._image_call("recognize", model, model_version, encoded, {}, timeout)
        results = parse_text_lines(_json(await self._send(call)))
        return results[0] if single else results

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
        """POST /v2/models/{model}[/versions/{version}]/infer; see :meth:`HttpClient.infer`."""
        call = self._infer_call(
            model,
            inputs,
            outputs,
            model_version,
            request_id,
            parameters,
            datatypes,
            binary,
            timeout,
            compression,
            classification,
            headers,
        )
        return _infer_result(await self._send(call))
