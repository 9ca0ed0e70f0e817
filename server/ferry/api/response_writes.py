"""A REST response's status line and headers go out in the same write as its body.

Why: uvicorn writes the head of a response as soon as the app starts it and the body in a second
write, so every answer cost two ``send`` calls, and on loopback each one runs the TCP stack and
wakes the client: with 2 intake processes the head's write alone was a quarter of an intake's
samples for a 602 KB ResNet-50 request (its answer is 4 KB). ``HeadWithBody`` stands between a
request's ``RequestResponseCycle`` and the socket's transport: it holds the head (the cycle's first
write once the response has started) until the body's first write, and writes both as one (a body
over ``JOIN_BYTES`` right after the head, to copy nothing large). What never writes a body (a HEAD
request) has its head written when the response completes (``responded``) or the cycle closes the
connection; flow control and everything else are the transport's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

#: A body up to this size is joined to its head (a copy); a larger one follows it in its own write.
JOIN_BYTES = 64 * 1024


class HeadWithBody:
    """The transport as one request's cycle sees it (see the module's doc)."""

    __slots__ = ("transport", "_cycle", "_head", "_held", "_on_response")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self.transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._held = False  # the head was taken (once per response)
        self._on_response: Callable[[], None] = cycle.on_response

    def responded(self) -> None:
        """The cycle's ``on_response`` (its response is complete): a head still held is written
        first (a HEAD request's), before the connection's next request is served."""
        self.flush()
        self._on_response()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if len(data) <= JOIN_BYTES:
                self.transport.write(head + data)
                return
            self.transport.write(head)
        elif not self._held and self._cycle.response_started:
            self._held = True
            self._head = bytes(data)
            return
        self.transport.write(data)

    def flush(self) -> None:
        """Write a head still held (a response without a body write)."""
        head = self._head
        if head is not None:
            self._head = None
            self.transport.write(head)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)
