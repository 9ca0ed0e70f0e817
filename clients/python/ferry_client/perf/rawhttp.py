"""The perf tool's lean HTTP/1.1 path: pre-serialised requests on keep-alive connections.

A load generator's own cost per request shows up as latency at low concurrency and as stolen CPU
at high concurrency (it shares the machine with the server). aiohttp costs a few hundred
microseconds a request in Python; here a request is one ``transport.write`` of bytes built once,
and the response is parsed by httptools (llhttp, the parser uvicorn uses), which makes the
tool's own overhead comparable to perf_analyzer's.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any
from urllib.parse import urlsplit

import httptools


class _Connection(asyncio.Protocol):
    """One keep-alive connection answering one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.body: list[bytes] = []
        self.closed = False
        self.keep_alive = True

    # asyncio.Protocol
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError(f"connection closed by the server{f': {exc}' if exc else ''}"))

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), b"".join(self.body)))
        self.body = []

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await self.waiter
        finally:
            self.waiter = None


class RawHttpClient:
    """Sends pre-built POSTs to one URL over a pool of keep-alive connections."""

    def __init__(self, url: str, path: str, ssl_context: ssl.SSLContext | None) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = path
        self.ssl = ssl_context
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    def build(self, body: bytes, headers: dict[str, str]) -> bytes:
        """The whole request as bytes: request line, headers, body."""
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
            self._all.discard(connection)
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl)
        self._all.add(protocol)
        return protocol

    async def post(self, request: bytes) -> tuple[int, bytes]:
        connection = await self._connection()
        try:
            result = await connection.exchange(request)
        except BaseException:
            self._discard(connection)
            raise
        if connection.keep_alive and not connection.closed:
            self._idle.append(connection)
        else:
            self._discard(connection)
        return result

    def _discard(self, connection: _Connection) -> None:
        self._all.discard(connection)
        if connection.transport is not None:
            connection.transport.close()

    async def close(self) -> None:
        for connection in list(self._all):
            self._discard(connection)
        self._idle.clear()
