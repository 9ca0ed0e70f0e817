"""How a REST request is read and answered, in both REST listeners (the model process's FastAPI app,
``http.py``, and an intake process's, ``intake/worker.py``): bodies read within the limit and counted
on the admission ticket, errors as ``{"error": "..."}`` with their status code, V2 infer and the image
endpoints.

Why apart from ``http.py``: an intake serves these without FastAPI, the data plane or the repository
manager, so it does not import them (issue 40: each intake process's start paid for importing them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ferry_client.codec import HEADER_LENGTH, dumps

from ..errors import FerryError, InvalidArgument, PayloadTooLarge
from ..pipelines.detection import Detection
from ..repository.model import ModelVersion
from ..types import Reserves
from ..workers import Workers, run_in
from .admission import Admission, Ticket
from .held_response import HeldResponse
from .http_codec import Inflater, compress_response, decode_infer_request, encode_infer_response
from .image_query import (
    CLASSIFY_QUERY,
    DETECT_QUERY,
    INFER_PARAMETERS,
    INFER_QUERY,
    QueryOption,
    parse_image_query,
)
from .inference_plane import InferencePlane
from .limits import OFF_LOOP_BYTES
from .multipart import multipart_files
from .received_body import ReceivedBody, read_body_into, takes_direct_read
from .response_size import estimated_size, reserve_outputs, reserve_response

log = logging.getLogger("ferry.api.http")  # the REST front door's log, in either listener

JSON = "application/json"
T = TypeVar("T")


def json_response(content: Any, status: int = 200) -> Response:
    return Response(dumps(content), status_code=status, media_type=JSON)


def detection_json(detection: Detection) -> dict[str, Any]:
    """One detection as /detect returns it; ``keypoints`` and ``polygon`` only for models that predict them."""
    result: dict[str, Any] = {
        "box": [round(v, 2) for v in detection.box],
        "score": detection.score,
        "class_id": detection.class_id,
        "label": detection.label,
    }
    if detection.keypoints is not None:
        result["keypoints"] = [[round(x, 2), round(y, 2)] for x, y in detection.keypoints]
    if detection.polygon is not None:  # text detectors: the quadrilateral, clockwise from the top-left
        result["polygon"] = [[round(x, 2), round(y, 2)] for x, y in detection.polygon]
    classes = getattr(detection, "classes", None)  # a cascade ensemble: the second model's classes
    if classes:
        result["classes"] = classes
    extras = getattr(detection, "extras", None)  # an ensemble's other outputs per detection
    if extras:
        result["extras"] = extras
    return result


def error_response(message: str, status: int) -> Response:
    return json_response({"error": message}, status)


async def read_body(request: Request, limit: int, workers: Workers, ticket: Ticket | None = None) -> bytes:
    """The (decompressed) body, counted against the admission ``ticket`` as it really arrives;
    inflated on the codec pool, a few bodies at a time (``workers.inflating``)."""
    declared = declared_length(request)
    if declared > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        if ticket is not None:
            ticket.reserve(len(chunk))
        chunks.append(chunk)
    body = await _joined(chunks, size, ticket)
    del chunks
    encoding = request.headers.get("content-encoding")
    if not encoding or encoding == "identity":
        return body
    inflater = Inflater(body, encoding, limit)
    pieces: list[bytes] = []
    # always on the pool (zlib releases the GIL): a small body may inflate to the limit; and
    # a few at a time, so a burst of bombs cannot take every core from the event loop; counted as
    # it grows, so what a bomb inflates to is refused once it would pass the in-flight cap
    async with workers.inflating:
        while not pieces or not inflater.done:
            pieces.append(await run_in(workers.codec, inflater.step))
            if ticket is not None:
                ticket.reserve(len(pieces[-1]))
    del body  # the inflater keeps only the unread rest of it, none once done
    if ticket is not None:
        ticket.release(size)
    return await _joined(pieces, sum(len(piece) for piece in pieces), ticket)


async def _joined(pieces: list[bytes], size: int, ticket: Ticket | None) -> bytes:
    """``pieces`` as one bytes object; the copy is counted while both exist (then the pieces go)."""
    if len(pieces) == 1:
        return pieces[0]
    if ticket is not None:
        ticket.reserve(size)
    joined = b"".join(pieces)
    pieces.clear()
    if ticket is not None:
        ticket.release(size)
    return joined


def declared_length(request: Request) -> int:
    """The body size the client announced (0 when chunked; the body limit still bounds it)."""
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else 0


async def off_loop_if_large(pool: Executor, size: int, function: Callable[..., T], *args: Any) -> T:
    """Run ``function`` here when ``size`` is small, on ``pool`` (the codec pool) when it is large,
    so one big request's decoding or encoding does not hold up every other connection."""
    if size < OFF_LOOP_BYTES:
        return function(*args)
    return await run_in(pool, function, *args)


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """Await ``work`` but cancel it if the client disconnects first, so a request whose caller went
    away is dropped from the queue instead of occupying an instance.

    ``work`` runs in a task of its own, which the watcher cancels. Running it in this task and
    cancelling this one instead saves a task but measured about 8 us a request more (an in-process
    REST loop of the tiny model, four runs each: 120 against 128 us), so the task stays."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_cancel_on_disconnect(request, task))
    try:
        return await task
    except asyncio.CancelledError:
        if watcher.done():  # the client is gone: nobody reads the answer
            return None
        raise
    finally:
        watcher.cancel()
        # an error raised by ``work`` has a traceback holding this frame, and the task holds the
        # error: emptying the names breaks that cycle, which would keep a refused request's body
        # alive until the garbage collector runs (in a quiet process, never)
        del watcher, task, work


async def _cancel_on_disconnect(request: Request, task: asyncio.Future[Any]) -> None:
    """The disconnect watcher: cancels ``task`` once the client has gone."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            task.cancel()
            return


def ferry_error_response(request: Request, exc: FerryError) -> Response:
    """A Ferry error as its status code and ``{"error": ...}``, with Retry-After when it has one."""
    response = error_response(exc.message, exc.http_status)
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(max(1, round(retry_after)))
    return response


def client_gone_response(request: Request, _: ClientDisconnect) -> Response:
    log.info("%s %s: the client disconnected before sending the whole body", request.method, request.url.path)
    return Response(status_code=499)  # nobody reads it


def unexpected_error_response(_: Request, exc: Exception) -> Response:
    log.exception("unexpected error", exc_info=exc)
    response = error_response(f"internal error: {exc}", 500)
    response.headers["Connection"] = "close"  # the server is in an unknown state for this connection
    return response


def error_to_response(request: Request, exc: Exception) -> Response:
    """The response the REST app's exception handlers give ``exc``, for routes served outside it."""
    if isinstance(exc, FerryError):
        return ferry_error_response(request, exc)
    if isinstance(exc, ClientDisconnect):
        return client_gone_response(request, exc)
    return unexpected_error_response(request, exc)


async def infer_response(
    plane: InferencePlane, model: str, version: str, request: Request, max_body_bytes: int, max_response_bytes: int
) -> Response:
    """``POST .../infer``: admit, read and decode the body, run the model, encode and compress."""
    declared = declared_length(request)
    plane.admission.check_room(declared)
    ticket = plane.admission.admit()  # held until the answer is written (HeldResponse)
    codec = plane.workers.codec
    received: ReceivedBody | None = None
    try:
        body: bytes | memoryview
        blob = None  # the binary section, when it was received apart from the JSON header
        json_length = request.headers.get(HEADER_LENGTH)
        read = None
        if takes_direct_read(request, declared) and declared <= max_body_bytes:
            json_bytes = int(json_length) if json_length and json_length.isdigit() else 0
            read = await read_body_into(
                request,
                declared,
                lambda: plane.receive_body(declared, json_bytes, ticket),  # counted, then allocated
            )
        if read is not None:
            received, (body, *rest) = read
            blob = rest[0] if rest else None
        else:
            body = await read_body(request, max_body_bytes, plane.workers, ticket)
        infer_request = await off_loop_if_large(
            codec,
            declared or len(body),
            decode_infer_request,
            model,
            version,
            body,
            json_length,
            plane.limits,
            blob,
        )
        del body, blob  # the tensors are views of them where possible; drop the names early
        infer_request.received = received
        infer_request.client = plane.identify(request.headers.get("authorization"))
        infer_request.ticket = ticket
        outputs = reserve_outputs(infer_request.inputs, ticket)
        response = await unless_disconnected(request, plane.infer(infer_request))
        if response is None:
            ticket.close()
            return Response(status_code=499)  # the caller is gone; nobody reads this
        reserve_response(response, max_response_bytes, ticket, binary_only=False, reserved=outputs)
        payload, header_length = await off_loop_if_large(
            codec, estimated_size(response, binary_only=False), encode_infer_response, response
        )
        del response
        headers = {} if header_length is None else {HEADER_LENGTH: str(header_length)}
        payload, encoding = await off_loop_if_large(
            codec, len(payload), compress_response, payload, request.headers.get("accept-encoding")
        )
    except BaseException:
        ticket.close()
        raise
    finally:
        if received is not None:
            received.release()
    if encoding:
        headers["Content-Encoding"] = encoding
    media_type = JSON if header_length is None else "application/octet-stream"
    return HeldResponse(payload, ticket.close, media_type=media_type, headers=headers)


class ImagePlane(Protocol):
    """What the image endpoints need: the model process's ``DataPlane``, or an intake process's
    ``intake.front_half.IntakeImages`` (the same stages, executions handed to the model process)."""

    admission: Admission
    workers: Workers

    async def serve_images(
        self,
        name: str,
        version: str,
        images: list[bytes],
        task: str,
        options: dict[str, Any],
        parameters: dict[str, Any] | None = None,
        ticket: Reserves | None = None,
    ) -> tuple[ModelVersion, list[Any]]: ...


#: Per image endpoint: the query parameters it takes and one image's result as JSON.
IMAGE_ENDPOINTS: dict[str, tuple[tuple[QueryOption, ...], Callable[[Any], dict[str, Any]]]] = {
    "classify": (CLASSIFY_QUERY + INFER_QUERY, lambda classes: {"classes": classes}),
    "embed": (INFER_QUERY, lambda vector: {"embedding": vector}),
    "recognize": (INFER_QUERY, lambda line: line),  # {"text", "score"} per text-line image
    "detect": (DETECT_QUERY + INFER_QUERY, lambda image: {"detections": [detection_json(d) for d in image]}),
    "ocr": (INFER_QUERY, lambda lines: {"lines": lines}),
}


async def _images(request: Request, ticket: Ticket, max_body_bytes: int, workers: Workers) -> list[bytes]:
    content_type = request.headers.get("content-type", "")
    body = await read_body(request, max_body_bytes, workers, ticket)  # within the body limit, counted
    if content_type.startswith("multipart/form-data"):
        files = await multipart_files(request.headers, body, ticket)
        ticket.release(len(body))  # the files are copies; the body goes when this returns
        if not files:
            raise InvalidArgument("multipart body holds no files; send images as file fields")
        return files
    if not body:
        raise InvalidArgument("empty body: send an image (raw body) or multipart/form-data with image files")
    return [body]


async def image_endpoint(
    plane: ImagePlane, request: Request, model: str, version: str, task: str, max_body_bytes: int
) -> Response:
    """/classify, /detect, /embed, /recognize and /ocr: parse the query, admit, read the images, run them
    (stopping if the caller leaves). ``priority`` and ``timeout`` in the query are infer's request
    parameters."""
    query, image_json = IMAGE_ENDPOINTS[task]
    options = parse_image_query(request.query_params, query, task)
    parameters = {name: options.pop(name) for name in INFER_PARAMETERS if name in options}
    plane.admission.check_room(declared_length(request))
    given = {key: value for key, value in parameters.items() if value is not None}
    with plane.admission.admit() as ticket:
        images = await _images(request, ticket, max_body_bytes, plane.workers)
        done = await unless_disconnected(
            request, plane.serve_images(model, version, images, task, options, given, ticket)
        )
    if done is None:
        return Response(status_code=499)  # the caller is gone: decoding stopped; nobody reads this
    served, results = done
    return json_response(
        {
            "model_name": served.name,
            "model_version": str(served.version),
            "results": [image_json(result) for result in results],
        }
    )
