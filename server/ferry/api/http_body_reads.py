"""A large REST body read by the kernel straight into the buffer the request will be served from.

uvicorn's httptools protocol copies a body 3 times in user space before an app sees it (the read's
``bytes``, httptools' slice for ``on_body``, ``bytearray +=``), then ``bytes(body)`` per ``receive``,
pausing and resuming the socket at every 64 KiB (its high-water mark); Ferry then joined the pieces
and, with intakes, wrote the tensors into the hand-off arena: 5-6 copies of a 602 KB tensor, each
into memory that often had to be faulted in. Here the protocol reads as an
``asyncio.BufferedProtocol`` (``BufferedReads``): its reads land in one scratch buffer per process
(parsed at once, nothing keeps a view of it), and once the app has admitted a body of a known
length and allocated its buffer (``receive_into``, reached through the request's scope), the rest
of the body is read by ``recv_into`` directly into that buffer: no parser callback, no pause at
the high-water mark, no join. What had already arrived is copied in once: what the read of the
request's head took with it, which is why that read is small (``HEAD_READ_BYTES``).

Only an identity body with exactly one Content-Length and no Transfer-Encoding takes this path: a
chunked or compressed body goes through ``receive`` as before, bounded as before. When the body is
complete the request's httptools parser, which never saw its bytes, is replaced by a fresh one for
the connection's next request. A client that stops mid-body is timed by the guard's body-rate check
as any body is (the bytes read here count as its progress); its disconnect fails the read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol, TypeVar

import httptools
from starlette.requests import ClientDisconnect
from starlette.types import Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class ReceivedBody(Protocol):
    """Memory for one body: ``parts`` (writable, filled in order, together exactly its declared
    length: the whole body, or its JSON header and its binary section apart) and ``release``,
    called once by the door when the request ends (what was handed on may keep it longer)."""

    parts: tuple[memoryview, ...]

    def release(self) -> None: ...


Body = TypeVar("Body", bound=ReceivedBody)

#: The scope key under which the protocol offers ``receive_into`` to the app.
RECEIVE_INTO = "ferry.receive_into"

#: The most a body's buffer may be ahead of what its client has sent when it is allocated: beyond
#: that, a client announcing a large body and sending little would make this process hold memory
#: (counted, so refusing others) it never sends.
DIRECT_AHEAD_BYTES = 2**20

#: What one read takes when no body buffer waits for it: uvicorn's high-water mark (it pauses reading
#: once its buffer holds more, so a larger read only overshoots it), and what a body's start may put
#: in that buffer before the app has allocated the body's memory (copied twice, see below).
READ_BYTES = 64 * 1024

#: What the read of a request's head takes at most. The head's read also takes the start of the
#: body, which waits in uvicorn's buffer (a copy) until the app has admitted the body and allocated
#: its memory, and is then copied again into that memory: with 256 KiB reads (uvloop's), ~40% of a
#: 602 KB tensor was copied twice. A head needs a read or two of this (``--http-max-header-bytes``).
HEAD_READ_BYTES = 16 * 1024

#: One process's reads land here and are parsed before the next read can start (a read and its
#: ``buffer_updated`` run back to back in the loop's thread), so every connection can share it.
_READS = memoryview(bytearray(READ_BYTES))
#: Its start, what the read of a head takes (made once: ``get_buffer`` runs for every read).
_HEAD_READS = _READS[:HEAD_READ_BYTES]


class DirectBodyProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose reads go where the app asks (see the module's doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sink: tuple[memoryview, ...] = ()  # where the rest of the body goes, in order
        self._part = 0  # the part being filled
        self._filled = 0  # bytes of it filled
        self._parsed_body = 0  # body bytes httptools gave this request (all in ``cycle.body`` until read)
        self._awaiting_head = True  # no request's head has been parsed since the last request ended

    # --- reads -------------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._sink:
            return self._sink[self._part][self._filled :]
        return _HEAD_READS if self._awaiting_head else _READS

    def buffer_updated(self, nbytes: int) -> None:
        sink = self._sink
        if not sink:
            self.data_received(_READS[:nbytes])  # type: ignore[arg-type]  # httptools parses any buffer
            return
        self._filled += nbytes
        self.body_progress(nbytes)
        if self._filled == len(sink[self._part]):
            self._part, self._filled = self._next_part(sink, self._part + 1, 0)
            if self._part == len(sink):  # the whole body arrived
                self._sink = ()
                self._fresh_parser()
                self.on_message_complete()

    def body_progress(self, nbytes: int) -> None:
        """``nbytes`` of a body arrived into its buffer (the guard counts them)."""

    # --- the app's side ----------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        self._parsed_body = 0
        self._awaiting_head = False
        super().on_headers_complete()
        if self.cycle is not None and self.cycle.scope is self.scope:
            self.scope[RECEIVE_INTO] = self.receive_into  # type: ignore[literal-required]

    def on_body(self, body: bytes) -> None:
        self._parsed_body += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._awaiting_head = True  # the next read starts the connection's next request
        super().on_message_complete()

    async def receive_into(self, scope: Scope, declared: int, allocate: Callable[[], Body]) -> Body | None:
        """Read the body of the request of ``scope`` into the memory ``allocate`` gives (it counts it
        in admission first, and may refuse it): its ``parts``, in order, together ``declared``
        bytes. None, allocating nothing, when this read cannot take it: not the request being
        read now, not a plain Content-Length body of that size, partly received already, or more
        than ``DIRECT_AHEAD_BYTES`` not arrived yet (a client announcing a large body and sending
        little holds only what it sent, as before); the caller reads it with ``receive`` then.
        Raises ClientDisconnect if the client goes first."""
        cycle = self.cycle
        if cycle is None or cycle.scope is not scope or self._sink or cycle.response_complete:
            return None
        arrived = len(cycle.body)
        if (
            arrived != self._parsed_body
            or declared - arrived > DIRECT_AHEAD_BYTES
            or _plain_length(scope["headers"]) != declared
        ):
            return None
        body = allocate()
        try:
            await self._fill(cycle, body.parts)
        except BaseException:
            body.release()
            raise
        return body

    async def _fill(self, cycle: RequestResponseCycle, parts: tuple[memoryview, ...]) -> None:
        """What arrived copied into ``parts``, the rest read into them as it comes."""
        if cycle.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            cycle.waiting_for_100_continue = False
        arrived = scatter(parts, 0, cycle.body)
        cycle.body = bytearray()
        if cycle.more_body and not cycle.disconnected:
            self._part, self._filled = self._next_part(parts, 0, arrived)
            self._sink = parts
            self.flow.resume_reading()  # paused at uvicorn's high-water mark: the rest has room now
        try:
            while cycle.more_body and not cycle.disconnected:
                cycle.message_event.clear()
                await cycle.message_event.wait()
        finally:
            if self._sink:  # left mid-body (cancelled): the parser never saw these bytes, so the
                self._sink = ()  # connection cannot go on to another request
                self.transport.close()
        if cycle.disconnected:
            raise ClientDisconnect()

    @staticmethod
    def _next_part(parts: tuple[memoryview, ...], part: int, filled: int) -> tuple[int, int]:
        """(part, filled) of byte ``filled`` from the start of ``parts[part]``, past full parts."""
        while part < len(parts) and filled >= len(parts[part]):
            filled -= len(parts[part])
            part += 1
        return part, filled

    def _fresh_parser(self) -> None:
        """A parser for the connection's next request: this one's never saw the body it read."""
        self.parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # httptools < 0.6.3 has none; as uvicorn's own
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)


class BufferedReads(asyncio.BufferedProtocol):
    """What the transport sees of a ``DirectBodyProtocol``: uvloop reads into a protocol's buffer
    only when it is no ``asyncio.Protocol``, which uvicorn's protocol is, so this forwards the
    transport's calls to one (built from uvicorn's arguments: pass this class as ``http=``)."""

    http_class: ClassVar[type[DirectBodyProtocol]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.http = self.http_class(*args, **kwargs)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.http.connection_made(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.http.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.http.eof_received()  # type: ignore[func-returns-value]

    def pause_writing(self) -> None:
        self.http.pause_writing()

    def resume_writing(self) -> None:
        self.http.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.http.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.http.buffer_updated(nbytes)


def _plain_length(headers: Iterable[tuple[bytes, bytes]]) -> int:
    """The Content-Length of a body that has exactly one and no Transfer-Encoding; -1 otherwise."""
    length = -1
    for name, value in headers:
        if name == b"content-length":
            if length >= 0 or not value.isdigit():
                return -1
            length = int(value)
        elif name == b"transfer-encoding":
            return -1
    return length


def scatter(parts: tuple[memoryview, ...], filled: int, data: bytes | bytearray | memoryview) -> int:
    """Copy ``data`` into ``parts`` (one space, in order) from byte ``filled``; the new fill."""
    end = filled + len(data)
    data = memoryview(data)
    offset = 0  # where this part starts
    for part in parts:
        low, high = max(filled, offset), min(end, offset + len(part))
        if low < high:
            part[low - offset : high - offset] = data[low - filled : high - filled]
        offset += len(part)
    return end
