"""The REST front door: KServe V2 / Triton HTTP paths on FastAPI, served by uvicorn.

Handlers only translate between HTTP and the data plane (reading and answering a request is
``http_requests.py``, shared with the intake processes); errors become ``{"error": "..."}`` with
the status code the error kind carries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from ..errors import FerryError, InvalidArgument
from ..repository.config import config_to_dict
from ..workers import Workers
from .dataplane import DataPlane
from .docs import mount_docs
from .generate import add_generate_routes
from .http_requests import (
    client_gone_response,
    error_response,
    ferry_error_response,
    image_endpoint,
    infer_response,
    json_response,
    read_body,
    unexpected_error_response,
)
from .image_query import CLASSIFY_QUERY, DETECT_QUERY, INFER_QUERY, openapi_query
from .json_body import parse_json_object
from .logging_ext import log_router
from .openapi import INDEX_BODY, INFER_BODY, LOAD_BODY, UNLOAD_BODY, document_real_errors
from .shared_memory_http import add_shared_memory_routes
from .trace_ext import trace_router


def _status_response(ok: bool, body: dict[str, Any]) -> Response:
    """A health answer: the status code says it (as Triton), the JSON body too (as the KServe spec)."""
    return json_response(body, 200 if ok else 503)


async def _json_body(request: Request, limit: int, workers: Workers) -> dict[str, Any]:
    return parse_json_object(await read_body(request, limit, workers))


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


def _as_handler(function: Callable[[Request, Any], Response]) -> Callable[[Request, Any], Awaitable[Response]]:
    async def handler(request: Request, exc: Any) -> Response:
        return function(request, exc)

    return handler


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
    add_generate_routes(app, plane, lambda request: read_body(request, max_body_bytes, plane.workers))
    return app
