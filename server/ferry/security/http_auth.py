"""Bearer-token auth for the REST front door, as a plain ASGI middleware.

A pure ASGI wrapper (not Starlette's BaseHTTPMiddleware) adds one header lookup per request and
rejects before the body is read, so unauthenticated callers cannot make the server parse anything.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ferry_client.codec import dumps

from ..errors import ErrorKind
from .policy import CHALLENGE, INVALID_TOKEN, AuthPolicy


class BearerAuthMiddleware:
    """Answer 401 with ``WWW-Authenticate: Bearer`` and ``{"error": ...}`` unless the token is valid."""

    def __init__(self, app: ASGIApp, policy: AuthPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.policy.http_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        authorization = next((value for key, value in scope["headers"] if key == b"authorization"), None)
        denial = self.policy.denial(authorization)
        if denial is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await _reject(send, denial)


async def _reject(send: Send, message: str) -> None:
    challenge = CHALLENGE + (', error="invalid_token"' if message == INVALID_TOKEN else "")
    body = dumps({"error": message})
    await send(
        {
            "type": "http.response.start",
            "status": ErrorKind.UNAUTHENTICATED.http_status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", challenge.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
