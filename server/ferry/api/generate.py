"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate`` and ``generate_stream``.

A flat JSON object in, flat JSON out: each key of the request that names a model input becomes
that input (a string is a BYTES element, numbers take the input's datatype, a list is a tensor;
the batch dimension is added for a batching model), ``parameters`` and every other key become
request parameters. Each output becomes a key of the response (one element as a scalar, BYTES as
text), next to ``model_name`` and ``model_version``. ``/generate`` answers with exactly one
response; ``/generate_stream`` sends each response of a decoupled model as a server-sent event
(``data: {...}``), an error mid-stream as ``data: {"error": ...}``. An error before the first
response is an ordinary JSON error with its status code. Works for every model, decoupled or not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from starlette.responses import Response, StreamingResponse

from ferry_client.codec import numpy_dtype

from ..errors import FerryError, InvalidArgument
from ..types import InferenceRequest, InferenceResponse, OutputTensor, TensorSpec
from .dataplane import DataPlane
from .limits import OFF_LOOP_BYTES
from .response_size import estimated_size
from .stream_limits import not_counted, rest_peer

JsonBody = Callable[[Request], Awaitable[dict[str, Any]]]
EVENT_STREAM = "text/event-stream; charset=utf-8"


def add_generate_routes(app: FastAPI, plane: DataPlane, json_body: JsonBody) -> None:
    @app.post("/v2/models/{model}/generate")
    @app.post("/v2/models/{model}/versions/{version}/generate")
    async def generate(model: str, request: Request, version: str = "") -> Response:
        with plane.admission.admit() as ticket:
            body = await json_body(request)
            ticket.reserve(len(json.dumps(body)))
            infer_request = generate_request(plane, model, version, body)
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
                        raise InvalidArgument(
                            f"generate expects exactly one response, but model '{model}' sent more: "
                            "use generate_stream for a model that sends several"
                        )
                    answer = item
            finally:
                await responses.aclose()  # stops the model's request when it is cut short
                leave()
        if answer is None:
            return Response(json.dumps(_empty(infer_request, plane)), media_type="application/json")
        return Response(json.dumps(generate_response(answer, plane)), media_type="application/json")

    @app.post("/v2/models/{model}/generate_stream")
    @app.post("/v2/models/{model}/versions/{version}/generate_stream")
    async def generate_stream(model: str, request: Request, version: str = "") -> Response:
        ticket = plane.admission.admit()  # held until the stream ends
        leave = not_counted
        try:
            body = await json_body(request)
            ticket.reserve(len(json.dumps(body)))
            infer_request = generate_request(plane, model, version, body)
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
                    yield await _event(first, plane)
                    async for item, _final in responses:
                        if isinstance(item, FerryError) or item.outputs:
                            yield await _event(item, plane)
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


async def _event(item: InferenceResponse | FerryError, plane: DataPlane) -> bytes:
    """One event, encoded off the loop when large (a stream of 256 KiB responses spent the loop's
    every turn in ``json.dumps``)."""
    if isinstance(item, FerryError) or estimated_size(item, binary_only=False) < OFF_LOOP_BYTES:
        return _encoded_event(item, plane)
    return await asyncio.to_thread(_encoded_event, item, plane)


def _encoded_event(item: InferenceResponse | FerryError, plane: DataPlane) -> bytes:
    content = {"error": item.message} if isinstance(item, FerryError) else generate_response(item, plane)
    return b"data: " + json.dumps(content).encode() + b"\n\n"


def generate_request(plane: DataPlane, model_name: str, version: str, body: dict[str, Any]) -> InferenceRequest:
    model = plane.model(model_name, version)
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgument("'parameters' must be a JSON object")
    parameters = dict(parameters)
    inputs: dict[str, np.ndarray] = {}
    for key, value in body.items():
        if key == "parameters":
            continue
        spec = model.inputs.get(key)
        if spec is None:
            parameters[key] = value  # not an input: a parameter, as Triton passes it
        else:
            inputs[key] = _tensor(spec, value, model.max_batch_size > 0)
    return InferenceRequest(
        model_name=model_name,
        model_version=version,
        inputs=inputs,
        input_datatypes={name: model.inputs[name].datatype for name in inputs},
        parameters=parameters,
    )


def _tensor(spec: TensorSpec, value: Any, batched: bool) -> np.ndarray:
    try:
        if spec.datatype == "BYTES":
            array = np.asarray(value, dtype=object)
            array = np.vectorize(_as_bytes, otypes=[object])(array) if array.size else array
        else:
            array = np.asarray(value, dtype=numpy_dtype(spec.datatype))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(
            f"input '{spec.name}': cannot make a {spec.datatype} tensor of {value!r}: {exc}"
        ) from None
    if array.ndim == 0:
        array = array.reshape(1)
    return array[np.newaxis] if batched else array


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"expected text, got {type(value).__name__}")


def generate_response(response: InferenceResponse, plane: DataPlane) -> dict[str, Any]:
    content: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    batched = plane.model(response.model_name, response.model_version).max_batch_size > 0
    for output in response.outputs:
        content[output.name] = _json_value(output, batched)
    return content


def _empty(request: InferenceRequest, plane: DataPlane) -> dict[str, Any]:
    model = plane.model(request.model_name, request.model_version)
    return {"model_name": model.name, "model_version": str(model.version)}


def _json_value(output: OutputTensor, batched: bool) -> Any:
    array = output.data
    if batched and array.ndim and array.shape[0] == 1:
        array = array[0]
    if output.datatype == "BYTES":
        array = np.vectorize(_as_text, otypes=[object])(array) if array.size else array
    values = array.tolist() if isinstance(array, np.ndarray) else array
    return values[0] if isinstance(values, list) and len(values) == 1 and not isinstance(values[0], list) else values


def _as_text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
