"""The REST front door: KServe V2 / Triton HTTP paths on FastAPI, served by uvicorn.

Handlers only translate between HTTP and the data plane; errors become ``{"error": "..."}`` with
the status code the error kind carries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from ferry_client.codec import HEADER_LENGTH, CodecError, dumps, loads_json

from ..errors import FerryError, InvalidArgument, PayloadTooLarge
from ..repository.config import config_to_dict
from .dataplane import DataPlane
from .http_codec import decode_infer_request, decompress, encode_infer_response
from .openapi import INDEX_BODY, INFER_BODY, LOAD_BODY, UNLOAD_BODY
from .shared_memory_http import add_shared_memory_routes

log = logging.getLogger(__name__)

JSON = "application/json"
T = TypeVar("T")


def json_response(content: Any, status: int = 200) -> Response:
    return Response(dumps(content), status_code=status, media_type=JSON)


def error_response(message: str, status: int) -> Response:
    return json_response({"error": message}, status)


def _status_response(ok: bool) -> Response:
    return Response(status_code=200 if ok else 503)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = _declared_length(request)
    if declared > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    return decompress(body, request.headers.get("content-encoding"), limit)


def _declared_length(request: Request) -> int:
    """The body size the client announced (0 when chunked; the body limit still bounds it)."""
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else 0


async def _json_body(request: Request, limit: int) -> dict[str, Any]:
    body = await _read_body(request, limit)
    if not body.strip():
        return {}
    try:
        parsed = loads_json(body)
    except CodecError as exc:
        raise InvalidArgument(str(exc)) from None
    if not isinstance(parsed, dict):
        raise InvalidArgument("request body must be a JSON object")
    return parsed


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """Await ``work`` but cancel it if the client disconnects first, so a request whose caller went
    away is dropped from the queue instead of occupying an instance."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                task.cancel()
                return

    watcher = asyncio.ensure_future(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if watcher.done():
            return None
        raise
    finally:
        watcher.cancel()


def create_http_app(plane: DataPlane, max_body_bytes: int = 256 * 1024 * 1024) -> FastAPI:
    """Build the REST application around a data plane."""
    app = FastAPI(
        title="Ferry",
        version=plane.server_metadata()["version"],
        description="KServe V2 / Open Inference Protocol REST API",
    )

    @app.exception_handler(FerryError)
    async def _ferry_error(_: Request, exc: FerryError) -> Response:
        response = error_response(exc.message, exc.http_status)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            response.headers["Retry-After"] = str(max(1, round(retry_after)))
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return error_response(str(exc.detail), exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        return error_response(f"invalid request: {exc.errors()}", 400)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unexpected error")
        return error_response(f"internal error: {exc}", 500)

    # --- health and metadata ----------------------------------------------------------------

    @app.get("/v2/health/live")
    async def server_live() -> Response:
        return _status_response(plane.live())

    @app.get("/v2/health/ready")
    async def server_ready() -> Response:
        return _status_response(plane.ready())

    @app.get("/v2")
    async def server_metadata() -> Response:
        return json_response(plane.server_metadata())

    @app.get("/v2/models/{model}/ready")
    @app.get("/v2/models/{model}/versions/{version}/ready")
    async def model_ready(model: str, version: str = "") -> Response:
        return _status_response(plane.model_ready(model, version))

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
        with plane.admission.admit(_declared_length(request)):
            body = await _read_body(request, max_body_bytes)
            infer_request = decode_infer_request(model, version, body, request.headers.get(HEADER_LENGTH), plane.limits)
            del body  # the tensors are views of it where possible; drop the name early
            response = await _unless_disconnected(request, plane.infer(infer_request))
            if response is None:
                return Response(status_code=499)  # the caller is gone; nobody reads this
            payload, header_length = encode_infer_response(response)
        if header_length is None:
            return Response(payload, media_type=JSON)
        return Response(payload, media_type="application/octet-stream", headers={HEADER_LENGTH: str(header_length)})

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

    async def _images(request: Request) -> list[bytes]:
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("multipart/form-data"):
            form = await request.form(max_files=1024, max_fields=1024)
            files = [await item.read() for _, item in form.multi_items() if not isinstance(item, str)]
            if not files:
                raise InvalidArgument("multipart body holds no files; send images as file fields")
            return files
        body = await _read_body(request, max_body_bytes)
        if not body:
            raise InvalidArgument("empty body: send an image (raw body) or multipart/form-data with image files")
        return [body]

    @app.post("/v2/models/{model}/classify", openapi_extra=image_body)
    @app.post("/v2/models/{model}/versions/{version}/classify", openapi_extra=image_body)
    async def classify(model: str, request: Request, version: str = "", top_k: int | None = None) -> Response:
        """Classify one image (raw body) or several (multipart): top-k labels and scores per image."""
        with plane.admission.admit(_declared_length(request)):
            served, results = await plane.run_images(
                model, version, await _images(request), "classify", {"top_k": top_k}
            )
        return json_response(
            {
                "model_name": served.name,
                "model_version": str(served.version),
                "results": [{"classes": r} for r in results],
            }
        )

    @app.post("/v2/models/{model}/detect", openapi_extra=image_body)
    @app.post("/v2/models/{model}/versions/{version}/detect", openapi_extra=image_body)
    async def detect(
        model: str,
        request: Request,
        version: str = "",
        score_threshold: float | None = None,
        iou_threshold: float | None = None,
        max_detections: int | None = None,
    ) -> Response:
        """Detect objects in one or several images: boxes in original pixels, labels and scores."""
        with plane.admission.admit(_declared_length(request)):
            served, results = await plane.run_images(
                model,
                version,
                await _images(request),
                "detect",
                {"score_threshold": score_threshold, "iou_threshold": iou_threshold, "max_detections": max_detections},
            )
        return json_response(
            {
                "model_name": served.name,
                "model_version": str(served.version),
                "results": [
                    {
                        "detections": [
                            {
                                "box": [round(v, 2) for v in d.box],
                                "score": d.score,
                                "class_id": d.class_id,
                                "label": d.label,
                                # a cascade ensemble: the second model's classes of this detection
                                **({"classes": d.classes} if getattr(d, "classes", None) else {}),
                            }
                            for d in image
                        ]
                    }
                    for image in results
                ],
            }
        )

    # --- repository -------------------------------------------------------------------------

    @app.post("/v2/repository/index", openapi_extra=INDEX_BODY)
    async def repository_index(request: Request) -> Response:
        body = await _json_body(request, max_body_bytes)
        ready = body.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgument("'ready' must be true or false")
        return json_response(plane.repository_index(ready_only=ready))

    @app.post("/v2/repository/models/{model}/load", openapi_extra=LOAD_BODY)
    async def load_model(model: str, request: Request) -> Response:
        body = await _json_body(request, max_body_bytes)
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
        body = await _json_body(request, max_body_bytes)
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidArgument("'parameters' must be a JSON object")
        dependents = parameters.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgument("parameter 'unload_dependents' must be true or false")
        await plane.unload_model(model, dependents)
        return Response(status_code=200)

    add_shared_memory_routes(
        app, plane.shared_memory, lambda request: _json_body(request, max_body_bytes), json_response
    )
    return app
