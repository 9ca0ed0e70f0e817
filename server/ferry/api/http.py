"""The REST front door: KServe V2 / Triton HTTP paths on FastAPI, served by uvicorn.

Handlers only translate between HTTP and the data plane; errors become ``{"error": "..."}`` with
the status code the error kind carries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from ferry_client.codec import HEADER_LENGTH, dumps

from ..errors import FerryError, InvalidArgument, PayloadTooLarge
from ..pipelines.detection import Detection
from ..repository.config import config_to_dict
from ..repository.model import ModelVersion
from ..types import Reserves
from ..workers import Workers, run_in
from .admission import Admission, Ticket
from .dataplane import DataPlane
from .docs import mount_docs
from .generate import add_generate_routes
from .held_response import HeldResponse
from .http_codec import Inflater, compress_response, decode_infer_request, encode_infer_response
from .image_query import (
    CLASSIFY_QUERY,
    DETECT_QUERY,
    INFER_PARAMETERS,
    INFER_QUERY,
    QueryOption,
    openapi_query,
    parse_image_query,
)
from .inference_plane import InferencePlane
from .json_body import parse_json_object
from .limits import OFF_LOOP_BYTES
from .logging_ext import log_router
from .multipart import multipart_files
from .openapi import INDEX_BODY, INFER_BODY, LOAD_BODY, UNLOAD_BODY, document_real_errors
from .received_body import ReceivedBody, read_body_into, takes_direct_read
from .response_size import estimated_size, reserve_outputs, reserve_response
from .shared_memory_http import add_shared_memory_routes
from .trace_ext import trace_router

log = logging.getLogger(__name__)

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


def _status_response(ok: bool, body: dict[str, Any]) -> Response:
    """A health answer: the status code says it (as Triton), the JSON body too (as the KServe spec)."""
    return json_response(body, 200 if ok else 503)


async def _read_body(request: Request, limit: int, workers: Workers, ticket: Ticket | None = None) -> bytes:
    """The (decompressed) body, counted against the admission ``ticket`` as it really arrives;
    inflated on the codec pool, a few bodies at a time (``workers.inflating``)."""
    declared = _declared_length(request)
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


def _declared_length(request: Request) -> int:
    """The body size the client announced (0 when chunked; the body limit still bounds it)."""
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else 0


async def _json_body(request: Request, limit: int, workers: Workers) -> dict[str, Any]:
    return parse_json_object(await _read_body(request, limit, workers))


async def _off_loop_if_large(pool: Executor, size: int, function: Callable[..., T], *args: Any) -> T:
    """Run ``function`` here when ``size`` is small, on ``pool`` (the codec pool) when it is large,
    so one big request's decoding or encoding does not hold up every other connection."""
    if size < OFF_LOOP_BYTES:
        return function(*args)
    return await run_in(pool, function, *args)


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
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


def _http_error_response(request: Request, exc: StarletteHTTPException) -> Response:
    """Starlette's own errors (no route, wrong method) as Ferry's JSON body. A path with a trailing slash
    is a 404 that says so: a redirect would drop a POST's body with some clients and answer nothing."""
    path = request.url.path
    if exc.status_code == 404 and len(path) > 1 and path.endswith("/"):
        return error_response(f"no route {path}: Ferry's paths have no trailing slash ({path.rstrip('/')})", 404)
    return error_response(str(exc.detail), exc.status_code)


def _validation_error_response(_: Request, exc: RequestValidationError) -> Response:
    """A parameter FastAPI could not convert, as one readable line (never a Python repr)."""
    problems = []
    for error in exc.errors():
        where = " ".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return error_response(f"invalid request: {'; '.join(problems)}", 400)


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


def _as_handler(function: Callable[[Request, Any], Response]) -> Callable[[Request, Any], Awaitable[Response]]:
    async def handler(request: Request, exc: Any) -> Response:
        return function(request, exc)

    return handler


async def infer_response(
    plane: InferencePlane, model: str, version: str, request: Request, max_body_bytes: int, max_response_bytes: int
) -> Response:
    """``POST .../infer``: admit, read and decode the body, run the model, encode and compress."""
    declared = _declared_length(request)
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
            body = await _read_body(request, max_body_bytes, plane.workers, ticket)
        infer_request = await _off_loop_if_large(
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
        response = await _unless_disconnected(request, plane.infer(infer_request))
        if response is None:
            ticket.close()
            return Response(status_code=499)  # the caller is gone; nobody reads this
        reserve_response(response, max_response_bytes, ticket, binary_only=False, reserved=outputs)
        payload, header_length = await _off_loop_if_large(
            codec, estimated_size(response, binary_only=False), encode_infer_response, response
        )
        del response
        headers = {} if header_length is None else {HEADER_LENGTH: str(header_length)}
        payload, encoding = await _off_loop_if_large(
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
    body = await _read_body(request, max_body_bytes, workers, ticket)  # within the body limit, counted
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
    plane.admission.check_room(_declared_length(request))
    given = {key: value for key, value in parameters.items() if value is not None}
    with plane.admission.admit() as ticket:
        images = await _images(request, ticket, max_body_bytes, plane.workers)
        done = await _unless_disconnected(
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


def create_http_app(
    plane: DataPlane, max_body_bytes: int = 256 * 1024 * 1024, max_response_bytes: int = 256 * 1024 * 1024
) -> FastAPI:
    """Build the REST application around a data plane."""
    app = FastAPI(
        title="Ferry",
        version=plane.server_metadata()["version"],
        description="KServe V2 / Open Inference Protocol REST API",
        docs_url=None,  # docs.mount_docs serves Swagger UI from a package instead of a CDN
        redoc_url=None,  # ReDoc would load from a CDN too
        redirect_slashes=False,  # /detect/ is a JSON 404 naming the path, not an empty 307
    )
    mount_docs(app)
    build_openapi = app.openapi
    app.openapi = lambda: document_real_errors(build_openapi())  # type: ignore[method-assign]

    app.add_exception_handler(FerryError, _as_handler(ferry_error_response))
    app.add_exception_handler(StarletteHTTPException, _as_handler(_http_error_response))
    app.add_exception_handler(RequestValidationError, _as_handler(_validation_error_response))
    app.add_exception_handler(ClientDisconnect, _as_handler(client_gone_response))
    app.add_exception_handler(Exception, _as_handler(unexpected_error_response))

    # --- protocol extensions: trace settings, logging ------------------------------------------

    app.include_router(trace_router(plane.tracing, plane.model))
    if plane.logging is not None:
        app.include_router(log_router(plane.logging))

    # --- health and metadata ----------------------------------------------------------------

    @app.get("/v2/health/live")
    async def server_live() -> Response:
        live = plane.live()
        return _status_response(live, {"live": live})

    @app.get("/v2/health/ready")
    async def server_ready() -> Response:
        body = plane.readiness()
        return _status_response(body["ready"], body)

    @app.get("/v2")
    async def server_metadata() -> Response:
        return json_response(plane.server_metadata())

    @app.get("/v2/models/{model}/ready")
    @app.get("/v2/models/{model}/versions/{version}/ready")
    async def model_ready(model: str, version: str = "") -> Response:
        ready = plane.model_ready(model, version)
        return _status_response(ready, {"name": model, "ready": ready})

    @app.get("/v2/models/stats")
    async def all_statistics() -> Response:
        return json_response({"model_stats": plane.statistics()})

    @app.get("/v2/models/{model}")
    @app.get("/v2/models/{model}/versions/{version}")
    async def model_metadata(model: str, version: str = "") -> Response:
        return json_response(plane.model_metadata(model, version))

    @app.get("/v2/models/{model}/config")
    @app.get("/v2/models/{model}/versions/{version}/config")
    async def model_config(model: str, version: str = "") -> Response:
        return json_response(config_to_dict(plane.model_config(model, version)))

    @app.get("/v2/models/{model}/stats")
    @app.get("/v2/models/{model}/versions/{version}/stats")
    async def model_statistics(model: str, version: str = "") -> Response:
        return json_response({"model_stats": plane.statistics(model, version)})

    # --- inference --------------------------------------------------------------------------

    @app.post("/v2/models/{model}/infer", openapi_extra=INFER_BODY)
    @app.post("/v2/models/{model}/versions/{version}/infer", openapi_extra=INFER_BODY)
    async def infer(model: str, request: Request, version: str = "") -> Response:
        return await infer_response(plane, model, version, request, max_body_bytes, max_response_bytes)

    # --- image endpoints ----------------------------------------------------------------------

    image_body = {
        "requestBody": {
            "required": True,
            "content": {
                "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
                "image/png": {"schema": {"type": "string", "format": "binary"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {"images": {"type": "array", "items": {"type": "string", "format": "binary"}}},
                    }
                },
            },
        }
    }

    classify_doc = {**image_body, "parameters": openapi_query(CLASSIFY_QUERY + INFER_QUERY)}
    detect_doc = {**image_body, "parameters": openapi_query(DETECT_QUERY + INFER_QUERY)}
    embed_doc = {**image_body, "parameters": openapi_query(INFER_QUERY)}

    @app.post("/v2/models/{model}/classify", openapi_extra=classify_doc)
    @app.post("/v2/models/{model}/versions/{version}/classify", openapi_extra=classify_doc)
    async def classify(model: str, request: Request, version: str = "") -> Response:
        """Classify one image (raw body) or several (multipart): top-k labels and scores per image.

        ``priority`` and ``timeout`` (microseconds) are the V2 infer request parameters."""
        return await image_endpoint(plane, request, model, version, "classify", max_body_bytes)

    @app.post("/v2/models/{model}/embed", openapi_extra=embed_doc)
    @app.post("/v2/models/{model}/versions/{version}/embed", openapi_extra=embed_doc)
    async def embed(model: str, request: Request, version: str = "") -> Response:
        """Embed one image (raw body) or several (multipart): one vector per image, as ferry_image.embedding says.

        ``priority`` and ``timeout`` (microseconds) are the V2 infer request parameters."""
        return await image_endpoint(plane, request, model, version, "embed", max_body_bytes)

    @app.post("/v2/models/{model}/recognize", openapi_extra=embed_doc)
    @app.post("/v2/models/{model}/versions/{version}/recognize", openapi_extra=embed_doc)
    async def recognize(model: str, request: Request, version: str = "") -> Response:
        """Read one text line (raw body) or several (multipart): each line's text and confidence, as
        ferry_image.text_recognition says (CTC). ``priority`` and ``timeout`` as V2 infer's."""
        return await image_endpoint(plane, request, model, version, "recognize", max_body_bytes)

    @app.post("/v2/models/{model}/detect", openapi_extra=detect_doc)
    @app.post("/v2/models/{model}/versions/{version}/detect", openapi_extra=detect_doc)
    async def detect(model: str, request: Request, version: str = "") -> Response:
        """Detect objects in one or several images: boxes in original pixels, labels and scores.

        ``priority`` and ``timeout`` (microseconds) are the V2 infer request parameters."""
        return await image_endpoint(plane, request, model, version, "detect", max_body_bytes)

    @app.post("/v2/models/{model}/ocr", openapi_extra=embed_doc)
    @app.post("/v2/models/{model}/versions/{version}/ocr", openapi_extra=embed_doc)
    async def read_text(model: str, request: Request, version: str = "") -> Response:
        """Read the text of one page (raw body) or several (multipart): per line its four corners
        (original pixels, clockwise from the top-left), text and confidence, in reading order."""
        return await image_endpoint(plane, request, model, version, "ocr", max_body_bytes)

    # --- repository -------------------------------------------------------------------------

    @app.post("/v2/repository/index", openapi_extra=INDEX_BODY)
    async def repository_index(request: Request) -> Response:
        body = await _json_body(request, max_body_bytes, plane.workers)
        ready = body.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgument("'ready' must be true or false")
        return json_response(plane.repository_index(ready_only=ready))

    @app.post("/v2/repository/models/{model}/load", openapi_extra=LOAD_BODY)
    async def load_model(model: str, request: Request) -> Response:
        body = await _json_body(request, max_body_bytes, plane.workers)
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidArgument("'parameters' must be a JSON object")
        config = parameters.get("config")
        if config is not None and not isinstance(config, str):
            raise InvalidArgument("parameter 'config' must be a string holding the model config as JSON")
        if any(key.startswith("file:") for key in parameters):
            raise InvalidArgument("loading model files through the API is not supported; place them in the repository")
        await plane.load_model(model, config)
        return Response(status_code=200)

    @app.post("/v2/repository/models/{model}/unload", openapi_extra=UNLOAD_BODY)
    async def unload_model(model: str, request: Request) -> Response:
        body = await _json_body(request, max_body_bytes, plane.workers)
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidArgument("'parameters' must be a JSON object")
        dependents = parameters.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgument("parameter 'unload_dependents' must be true or false")
        await plane.unload_model(model, dependents)
        return Response(status_code=200)

    add_shared_memory_routes(
        app,
        plane.shared_memory,
        plane.identify,
        lambda request: _json_body(request, max_body_bytes, plane.workers),
        json_response,
    )
    add_generate_routes(app, plane, lambda request: _read_body(request, max_body_bytes, plane.workers))
    return app
