"""Forwards REST requests an intake process does not serve itself to the core's full app.

Why: only the inference route runs in the intake processes; health, metadata, repository control,
statistics, the image endpoints, the dashboard and the docs live in the core process, which serves
its normal REST app on a unix domain socket. This ASGI app relays each request there as it came
(method, raw path and query, headers, streamed body) and the answer back as it went (status,
every header, the body still compressed), so a client sees what one process would answer.

Hop-by-hop headers are not relayed (each connection has its own), nor the core's ``Server`` and
``Date``: the intake's uvicorn adds its own, as for the responses it makes itself. A client that
goes away cancels its forwarded request, which closes that connection to the core. The core being
unreachable is a 503 with a JSON error; a request that cannot be relayed as sent is a 400.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx
from starlette.types import Receive, Scope, Send

from ..api.http_requests import error_response
from ..api.stream_limits import PEER_HEADER

log = logging.getLogger(__name__)

#: Headers that describe one connection, not the request (RFC 9110 section 7.6.1).
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"})
#: Response headers the intake's own HTTP server writes (uvicorn's defaults); the core's are dropped.
SERVER_HEADERS = frozenset({b"server", b"date"})
UNREACHABLE = "the model process is not reachable; try again later"
PEER = PEER_HEADER.encode()
#: Optional white space around a field value is not part of it (RFC 9110 section 5.5). The intake's
#: parser keeps trailing OWS, which httpx refuses to send; stripped, every header a client may
#: legally send is relayed.
OWS = b" \t"


def end_to_end(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` without the hop-by-hop ones: fixed names, ``proxy-*`` and those ``Connection`` lists."""
    named = {
        token.strip().lower() for name, value in headers if name.lower() == b"connection" for token in value.split(b",")
    }
    return [
        (name, value)
        for name, value in headers
        if (lowered := name.lower()) not in HOP_BY_HOP and lowered not in named and not lowered.startswith(b"proxy-")
    ]


class _ClientGone(Exception):
    """The client disconnected while its request body was being relayed."""


class _RequestBody:
    """The client's body as an async iterator for httpx, and the client's disconnect as an event."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self._read = asyncio.Event()  # the body was relayed to its end: ``receive`` is free to watch
        self.gone = asyncio.Event()

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self.gone.set()
                raise _ClientGone
            yield message.get("body", b"")
            if not message.get("more_body", False):
                self._read.set()
                return

    def skip(self) -> None:
        """No body is relayed (the request declares none): watch for the disconnect at once."""
        self._read.set()

    async def watch(self) -> None:
        """Return once the client has disconnected (uvicorn also says so after the response ended)."""
        await self._read.wait()
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.gone.set()


def _keep_dot_segments(raw_path: bytes) -> bytes:
    """Percent-encode ``.`` and ``..`` segments, which httpx would otherwise resolve away: the core
    must see the path the client sent (``/v2/repository/models/../load`` is an invalid model name,
    not another route), and it decodes them back to the same ``scope["path"]``."""
    segments = raw_path.split(b"/")
    if b"." not in segments and b".." not in segments:
        return raw_path
    return b"/".join(segment.replace(b".", b"%2E") if segment in (b".", b"..") else segment for segment in segments)


def _declares_body(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name in (b"content-length", b"transfer-encoding") for name, _ in headers)


class ForwardToCore:
    """ASGI app relaying every HTTP request to the server listening on the unix socket ``uds_path``."""

    def __init__(self, uds_path: str, max_connections: int = 1000, keepalive_expiry: float = 2.0) -> None:
        """``keepalive_expiry`` must stay below the core's keep-alive timeout, so a pooled connection
        is never reused just as the core closes it; ``max_connections`` bounds the pool, and requests
        beyond it wait for a free connection."""
        self.uds_path = uds_path
        transport = httpx.AsyncHTTPTransport(
            uds=uds_path,
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=keepalive_expiry,
            ),
        )
        # No timeout: the core enforces its own limits. The jar keeps no cookie: Set-Cookie is the client's.
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=None,
            cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),
            trust_env=False,
        )

    async def aclose(self) -> None:
        """Close the pooled connections to the core."""
        await self._client.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":  # the dashboard polls JSON: no websocket route exists to forward to
            await send({"type": "websocket.close", "code": 1003})
            return
        body = _RequestBody(receive)
        relaying = asyncio.ensure_future(self._relay(scope, body, send))
        watching = asyncio.ensure_future(body.watch())
        try:
            await asyncio.wait((relaying, watching), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            if not relaying.done():  # the client went away (or the server is stopping): drop the request
                relaying.cancel()
            await asyncio.gather(watching, relaying, return_exceptions=True)
        error = None if relaying.cancelled() else relaying.exception()
        if error is not None:
            raise error

    async def _relay(self, scope: Scope, body: _RequestBody, send: Send) -> None:
        headers = [(name, value.strip(OWS)) for name, value in end_to_end(scope["headers"]) if name.lower() != PEER]
        client = scope.get("client")
        if client:  # who the client is, for the model process's per-address counts (stream_limits.py)
            headers.append((PEER, client[0].encode()))
        if _declares_body(scope["headers"]):
            content: AsyncIterator[bytes] | None = body.chunks()
        else:
            content = None
            body.skip()
        raw_path = _keep_dot_segments(scope.get("raw_path") or scope["path"].encode())
        query = scope.get("query_string", b"")
        url = httpx.URL(scheme="http", host="ferry-core", raw_path=raw_path + (b"?" + query if query else b""))
        request = httpx.Request(scope["method"], url, headers=headers, content=content)
        try:
            # ``send`` of a built request: the client adds none of its default headers
            response = await self._client.send(request, stream=True)
        except _ClientGone:
            return
        except httpx.LocalProtocolError as exc:  # the request itself cannot be sent on: the client's fault
            await error_response(f"the request cannot be relayed to the model process: {exc}", 400)(
                scope, body.receive, send
            )
            return
        except httpx.TransportError as exc:
            if body.gone.is_set():
                return
            log.warning(
                "cannot forward %s %s to the core at %s: %r", scope["method"], scope["path"], self.uds_path, exc
            )
            await error_response(UNREACHABLE, 503)(scope, body.receive, send)
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(k, v) for k, v in end_to_end(response.headers.raw) if k.lower() not in SERVER_HEADERS],
                }
            )
            async for chunk in response.aiter_raw():  # raw: a gzip body stays gzip
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """For a server run with a lifespan: nothing to start; shutting down closes the pool."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
