"""What Python models get from the server they run in: permission to load, and calls to other models.

Set once by the server at start (``configure``). ``InferenceRequest.exec()`` inside a model becomes
a call to the data plane on the server's event loop, so it is validated and batched like any
request, and the tensors pass as numpy arrays without serialisation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from dataclasses import dataclass

from ferry_client.codec import CodecError, v2_datatype

from ...errors import ErrorKind, FerryError
from ...types import InferenceRequest, InferenceResponse, RequestedOutput
from . import triton_python_backend_utils as pb_utils

Infer = Callable[[InferenceRequest], Awaitable[InferenceResponse]]
Stream = Callable[[InferenceRequest], AsyncGenerator[tuple[InferenceResponse | FerryError, bool], None]]

ALLOW_OPTION = "--allow-python-models (FERRY_ALLOW_PYTHON_MODELS=1)"

_CODE_BY_KIND = {
    ErrorKind.INVALID_ARGUMENT: pb_utils.TritonError.INVALID_ARG,
    ErrorKind.NOT_FOUND: pb_utils.TritonError.NOT_FOUND,
    ErrorKind.ALREADY_EXISTS: pb_utils.TritonError.ALREADY_EXISTS,
    ErrorKind.UNAVAILABLE: pb_utils.TritonError.UNAVAILABLE,
    ErrorKind.UNIMPLEMENTED: pb_utils.TritonError.UNSUPPORTED,
    ErrorKind.CANCELLED: pb_utils.TritonError.CANCELLED,
}


@dataclass
class PythonModelHost:
    """Process-wide: Python models are refused unless ``allowed``; ``infer`` serves their calls."""

    allowed: bool = False
    infer: Infer | None = None
    loop: asyncio.AbstractEventLoop | None = None
    stream: Stream | None = None


HOST = PythonModelHost()


def configure(
    allowed: bool,
    infer: Infer | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    stream: Stream | None = None,
) -> None:
    """Called by the server at start: whether Python models may load, and how they reach other models."""
    HOST.allowed, HOST.infer, HOST.loop, HOST.stream = allowed, infer, loop, stream
    pb_utils._install_caller(call_model, call_model_async, call_model_stream)


def call_model_stream(request: pb_utils.InferenceRequest) -> Iterator[pb_utils.InferenceResponse]:
    """``exec(decoupled=True)``: the called model's responses, each as it comes (from a worker thread);
    the last is empty when the model ended without data, as in Triton."""
    loop = _server_loop()
    if _running_loop() is loop:
        raise pb_utils.TritonModelException("exec() cannot block the server's event loop; use async_exec()")
    responses = _stream(request)
    try:
        while True:
            try:
                yield asyncio.run_coroutine_threadsafe(_next(responses), loop).result()
            except StopAsyncIteration:
                return
    finally:  # the model stopped early: cancel the called model's request
        asyncio.run_coroutine_threadsafe(responses.aclose(), loop).result()


async def _next(responses: AsyncGenerator[pb_utils.InferenceResponse, None]) -> pb_utils.InferenceResponse:
    return await responses.__anext__()


async def _stream(request: pb_utils.InferenceRequest) -> AsyncGenerator[pb_utils.InferenceResponse, None]:
    if HOST.stream is None:
        raise pb_utils.TritonModelException("exec(decoupled=True) needs a running Ferry server")
    try:
        async for item, _final in HOST.stream(server_request(request)):
            if isinstance(item, FerryError):
                yield _error_response(item)
            else:
                yield pb_utils.InferenceResponse([pb_utils.Tensor(o.name, o.data) for o in item.outputs])
    except FerryError as exc:
        yield _error_response(exc)
    except Exception as exc:  # a failing call fails the caller's response, not the server
        yield pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(exc).__name__}: {exc}"))


def _error_response(exc: FerryError) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message, _CODE_BY_KIND.get(exc.kind, 1)))


def call_model(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
    """``exec()``: run a request on another model and wait (from a scheduler's worker thread)."""
    loop = _server_loop()
    if _running_loop() is loop:
        raise pb_utils.TritonModelException("exec() cannot block the server's event loop; use async_exec()")
    return asyncio.run_coroutine_threadsafe(_infer(request), loop).result()


def call_model_async(request: pb_utils.InferenceRequest) -> Awaitable[pb_utils.InferenceResponse]:
    """``async_exec()``: the same call as an awaitable for the model's own event loop."""
    return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_infer(request), _server_loop()))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _server_loop() -> asyncio.AbstractEventLoop:
    if HOST.loop is None or HOST.infer is None:
        raise pb_utils.TritonModelException("calls to other models need a running Ferry server")
    return HOST.loop


async def _infer(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
    assert HOST.infer is not None
    try:
        response = await HOST.infer(server_request(request))
    except FerryError as exc:
        return _error_response(exc)
    except Exception as exc:  # a failing call fails the caller's response, not the server
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(exc).__name__}: {exc}"))
    return pb_utils.InferenceResponse([pb_utils.Tensor(o.name, o.data) for o in response.outputs])


def server_request(request: pb_utils.InferenceRequest) -> InferenceRequest:
    """The data plane's request for a model's ``InferenceRequest`` (arrays are passed, not copied)."""
    inputs = {tensor.name(): tensor.as_numpy() for tensor in request.inputs()}
    try:
        datatypes = {name: v2_datatype(array.dtype) for name, array in inputs.items()}
    except CodecError as exc:
        raise FerryError(str(exc), ErrorKind.INVALID_ARGUMENT) from None
    version = request.model_version
    return InferenceRequest(
        model_name=request.model_name,
        model_version=str(version) if isinstance(version, int) and version >= 0 else "",
        id=request.request_id(),
        inputs=inputs,
        input_datatypes=datatypes,
        outputs=[RequestedOutput(name) for name in request.requested_output_names()] or None,
        parameters=_parameters(request),
    )


def _parameters(request: pb_utils.InferenceRequest) -> dict:
    parameters = json.loads(request.parameters())
    if request.timeout():
        parameters.setdefault("timeout", request.timeout())
    return parameters
