"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate`` and ``generate_stream``.

A flat JSON object in, flat JSON out, mapped as Triton maps it: each key of the request that
names a model input becomes that input (a string is a BYTES element, numbers take the input's
datatype; a scalar or a list is filled into the input's declared shape, so dims ``[1, 1]`` take
``"hello"``), ``id`` is the request id, ``parameters`` is a nested object mapped the same way, and
every other key becomes a request parameter (a Python model reads them in ``request.parameters()``).
A key given twice is refused. Each output becomes a key of the response (flattened, one element as
a scalar, BYTES as text), next to ``id`` (when the request had one), ``model_name`` and
``model_version``. ``/generate`` answers with exactly one response; ``/generate_stream`` sends each
response of a decoupled model as a server-sent event (``data: {...}``), an error mid-stream as
``data: {"error": ...}``. An error before the first response is an ordinary JSON error with its
status code. Works for every model, decoupled or not.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Executor
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from starlette.responses import Response, StreamingResponse

from ferry_client.codec import numpy_dtype

from ..errors import FerryError, InvalidArgument
from ..repository.model import ModelVersion
from ..types import InferenceRequest, InferenceResponse, OutputTensor, Reserves, TensorSpec
from ..workers import run_in
from .dataplane import DataPlane
from .limits import OFF_LOOP_BYTES
from .response_size import estimated_size
from .stream_limits import not_counted, rest_peer

ReadBody = Callable[[Request], Awaitable[bytes]]
EVENT_STREAM = "text/event-stream; charset=utf-8"
#: Triton's words when /generate gets other than one response.
NOT_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)


def add_generate_routes(app: FastAPI, plane: DataPlane, read_body: ReadBody) -> None:
    @app.post("/v2/models/{model}/generate")
    @app.post("/v2/models/{model}/versions/{version}/generate")
    async def generate(model: str, request: Request, version: str = "") -> Response:
        with plane.admission.admit() as ticket:
            body = await read_body(request)
            ticket.reserve(len(body))
            infer_request = generate_request(plane, model, version, parse_generate_body(body), ticket)
            answer: InferenceResponse | None = None
            leave = _enter_streamed(plane, request, infer_request)
            responses = plane.infer_stream(infer_request)
            try:
                async for item, _final in responses:
                    if isinstance(item, FerryError):
                        raise item
                    if not item.outputs:
                        continue  # a decoupled model's bare final response
                    if answer is not None:
                        raise InvalidArgument(NOT_ONE_RESPONSE)
                    answer = item
            finally:
                await responses.aclose()  # stops the model's request when it is cut short
                leave()
        if answer is None:
            raise InvalidArgument(NOT_ONE_RESPONSE)
        return Response(json.dumps(generate_response(answer)), media_type="application/json")

    @app.post("/v2/models/{model}/generate_stream")
    @app.post("/v2/models/{model}/versions/{version}/generate_stream")
    async def generate_stream(model: str, request: Request, version: str = "") -> Response:
        ticket = plane.admission.admit()  # held until the stream ends
        leave = not_counted
        try:
            body = await read_body(request)
            ticket.reserve(len(body))
            infer_request = generate_request(plane, model, version, parse_generate_body(body), ticket)
            leave = _enter_streamed(plane, request, infer_request)
            responses = plane.infer_stream(infer_request)
            first = await _first_data(responses)  # errors before it are ordinary JSON errors
        except BaseException:
            leave()
            ticket.close()
            raise

        async def events() -> AsyncIterator[bytes]:
            try:
                if first is not None:
                    yield await _event(first, plane.workers.codec)
                    async for item, _final in responses:
                        if isinstance(item, FerryError) or item.outputs:
                            yield await _event(item, plane.workers.codec)
            finally:
                await responses.aclose()
                leave()
                ticket.close()

        # Starlette ends the stream once the client is gone (cut for reading too slowly, or left):
        # its watcher needs a turn of the loop, which every event gives (``_event``, ResponseStream)
        return StreamingResponse(events(), media_type=EVENT_STREAM)


def _enter_streamed(plane: DataPlane, request: Request, infer_request: InferenceRequest) -> Callable[[], None]:
    """Count a request to a decoupled model against its client address's streamed requests
    (``stream_limits.py``); what uncounts it. Requests to other models (one answer each) are not
    counted here."""
    if not plane.is_decoupled(infer_request.model_name, infer_request.model_version):
        return not_counted
    client = (request.client.host, request.client.port) if request.client else None
    return plane.stream_limits.enter(rest_peer(client, request.headers))


async def _first_data(
    responses: AsyncGenerator[tuple[InferenceResponse | FerryError, bool], None],
) -> InferenceResponse | FerryError | None:
    """The first response worth an event (skipping a bare final one); an error raises."""
    async for item, _final in responses:
        if isinstance(item, FerryError):
            raise item
        if item.outputs:
            return item
    return None


async def _event(item: InferenceResponse | FerryError, pool: Executor) -> bytes:
    """One event, encoded on ``pool`` (the codec threads) when large (a stream of 256 KiB responses
    spent the loop's every turn in ``json.dumps``)."""
    if isinstance(item, FerryError) or estimated_size(item, binary_only=False) < OFF_LOOP_BYTES:
        return _encoded_event(item)
    return await run_in(pool, _encoded_event, item)


def _encoded_event(item: InferenceResponse | FerryError) -> bytes:
    content = {"error": item.message} if isinstance(item, FerryError) else generate_response(item)
    return b"data: " + json.dumps(content).encode() + b"\n\n"


def parse_generate_body(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, refusing a key given twice at the top level (Triton adds each
    key as an input or a parameter, so the second one fails: "already exists in request")."""
    if not body.strip():
        return {}
    try:
        parsed = json.loads(body, object_pairs_hook=_Keys.of)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"malformed JSON in generate request: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgument("generate request body must be a JSON object")
    return parsed


class _Keys(dict):
    """A JSON object that remembers the first key it was given twice."""

    duplicate: str | None = None

    @classmethod
    def of(cls, pairs: list[tuple[str, Any]]) -> _Keys:
        keys = cls()
        for key, value in pairs:
            if key in keys and keys.duplicate is None:
                keys.duplicate = key
            keys[key] = value
        return keys


def generate_request(
    plane: DataPlane, model_name: str, version: str, body: dict[str, Any], ticket: Reserves
) -> InferenceRequest:
    """Triton's mapping: a key naming an input is that input, filled into the input's declared
    shape; ``id`` is the request id; ``parameters`` is a nested object mapped the same way; every
    other key is a request parameter (a string, number or boolean). ``ticket``: its admission."""
    model = plane.model(model_name, version)
    request_id = body.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("generate request 'id' must be a string")
    inputs: dict[str, np.ndarray] = {}
    parameters: dict[str, Any] = {}
    _map(model, {k: v for k, v in body.items() if k != "id"}, inputs, parameters, getattr(body, "duplicate", None))
    return InferenceRequest(
        model_name=model_name,
        model_version=version,
        id=request_id,
        inputs=inputs,
        input_datatypes={name: model.inputs[name].datatype for name in inputs},
        parameters=parameters,
        ticket=ticket,
    )


def _map(
    model: ModelVersion,
    body: dict[str, Any],
    inputs: dict[str, np.ndarray],
    parameters: dict[str, Any],
    duplicate: str | None,
) -> None:
    for key, value in body.items():
        if key == duplicate:  # Triton adds keys in order: the repeated one is refused when added again
            what = "input" if key in model.inputs else "parameter"
            raise InvalidArgument(f"{what} '{key}' already exists in request")
        if key == "parameters":
            if key in model.inputs:
                raise InvalidArgument("Keyword 'parameters' for nested schema also given as input tensor name")
            if not isinstance(value, dict):
                raise InvalidArgument("Expected JSON object for keyword: 'parameters'")
            try:
                _map(model, value, inputs, parameters, getattr(value, "duplicate", None))
            except InvalidArgument as exc:
                raise InvalidArgument(f"Converting keyword: 'parameters': {exc.message}") from None
        elif key in model.inputs:
            inputs[key] = _tensor(model.inputs[key], value, model.max_batch_size > 0)
        elif isinstance(value, str | int | float):  # bool is an int
            parameters[key] = value
        else:
            raise InvalidArgument(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
            )


def _tensor(spec: TensorSpec, value: Any, batched: bool) -> np.ndarray:
    """A scalar or a list filled into the input's declared shape (Triton's generate extension:
    fixed dimensions take their share of the elements, the innermost variable one the rest, other
    variable ones 1); a nested list keeps its own shape."""
    values = value if isinstance(value, list) else [value]
    for element in _leaves(values):
        _check_json_type(spec, element)
    try:
        if spec.datatype == "BYTES":
            array = np.asarray(values, dtype=object)
            array = np.vectorize(_as_bytes, otypes=[object])(array) if array.size else array
        else:
            array = np.asarray(values, dtype=numpy_dtype(spec.datatype))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(
            f"input '{spec.name}': cannot make a {spec.datatype} tensor of {value!r}: {exc}"
        ) from None
    declared = (-1, *spec.dims) if batched else tuple(spec.dims)
    if array.ndim > 1:
        return array[np.newaxis] if batched else array
    return array.reshape(_fitted_shape(spec.name, declared, array.size))


def _fitted_shape(name: str, declared: tuple[int, ...], count: int) -> tuple[int, ...]:
    shape = list(declared)
    rest = count
    for dim in reversed(shape):
        if dim != -1:
            if dim == 0 or rest % dim:
                raise InvalidArgument(f"The schema can not convert input '{name}' to tensor with proper shape")
            rest //= dim
    for index in reversed(range(len(shape))):
        if shape[index] == -1:
            shape[index], rest = rest, 1
    if rest != 1:
        raise InvalidArgument(f"The schema can not convert input '{name}' to tensor with proper shape")
    return tuple(shape)


def _leaves(values: list[Any]) -> Iterator[Any]:
    """The non-list elements of a nested list, without recursion (a hostile body nests deeply)."""
    stack = [iter(values)]
    while stack:
        for value in stack[-1]:
            if isinstance(value, list):
                stack.append(iter(value))
                break
            yield value
        else:
            stack.pop()


#: What JSON value each datatype reads, and Triton's words when it is something else.
_JSON_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "BYTES": (lambda v: isinstance(v, str), "non-string as string"),
    "BOOL": (lambda v: isinstance(v, bool), "non-boolean as boolean"),
    "INT": (lambda v: isinstance(v, int) and not isinstance(v, bool), "non-signed-integer as signed-integer"),
    "UINT": (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "non-unsigned-integer as unsigned-integer",
    ),
    "FP": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "non-number as number"),
}


def _check_json_type(spec: TensorSpec, value: Any) -> None:
    kind = next((k for k in _JSON_KINDS if spec.datatype.startswith(k)), None)
    if kind is None:
        return
    accepts, words = _JSON_KINDS[kind]
    if not accepts(value):
        raise InvalidArgument(f"input '{spec.name}': Unable to parse 'data': attempt to access JSON {words}")


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    # a list numpy kept as an element: nested deeper than a tensor can be
    raise TypeError(f"expected text, got {type(value).__name__}")


def generate_response(response: InferenceResponse) -> dict[str, Any]:
    """Triton's generate answer: ``id`` when the request had one, the model, and each output
    flattened (one element as a scalar)."""
    content: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        content["id"] = response.id
    for output in response.outputs:
        content[output.name] = _json_value(output)
    return content


def _json_value(output: OutputTensor) -> Any:
    array = np.asarray(output.data).reshape(-1)
    if output.datatype == "BYTES":
        array = np.vectorize(_as_text, otypes=[object])(array) if array.size else array
    values = array.tolist()
    return values[0] if len(values) == 1 else values


def _as_text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
