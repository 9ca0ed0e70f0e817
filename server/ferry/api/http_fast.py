"""A lean route for ``POST /v2/models/{m}[/versions/{v}]/infer`` in front of the FastAPI app.

Why: on the tiny model most of a REST request's server CPU went to FastAPI's and Starlette's
routing, dependency and middleware layers, not to Ferry. This ASGI app matches exactly the
inference path and calls the same handler (``http.infer_response``) and the same error mapping
(``http.error_to_response``) the FastAPI route uses, so admission, body limits, decoding,
compression and error statuses are identical; every other request goes to the FastAPI app.
Authentication stays in front of this app (``ServerSecurity.http_app`` wraps it).
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from .http_requests import error_to_response, infer_response
from .inference_plane import InferencePlane

#: The inference path as FastAPI routes it: a path segment each for model and version.
INFER_PATH = re.compile(r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/infer")


class InferFastPath:
    """Serve inference requests directly; hand everything else to ``app``."""

    def __init__(self, app: ASGIApp, plane: InferencePlane, max_body_bytes: int, max_response_bytes: int) -> None:
        self.app = app
        self.plane = plane
        self.max_body_bytes = max_body_bytes
        self.max_response_bytes = max_response_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = INFER_PATH.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await infer_response(
                self.plane,
                match["model"],
                match["version"] or "",
                request,
                self.max_body_bytes,
                self.max_response_bytes,
            )
        except Exception as exc:  # mapped exactly as the FastAPI app's exception handlers map it
            response = error_to_response(request, exc)
        await response(scope, receive, send)
