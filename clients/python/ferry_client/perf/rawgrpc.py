"""The perf tool's lean gRPC path: unary ModelInfer calls as pre-built HTTP/2 frames.

grpcio's client costs about 220 us of CPU per unary call (C-core plus its Python glue), and on a
small machine that CPU is taken from the server being measured. A unary gRPC call is only
HEADERS + DATA (a 5-byte prefix and the message) out, and HEADERS + DATA + trailers back. Here
the request frames are built once and only the stream id is written per call; the response
frames are read with a few slices, and header blocks go through hpack (the HPACK library of the
h2 project). The h2 library itself was measured at ~270 us per call, more than grpcio.

Only what a unary client needs: flow control both ways, SETTINGS / PING acknowledgements,
RST_STREAM and GOAWAY, the server's stream limit (more connections when it is reached), TLS with
ALPN. Every response is checked: HTTP status 200, ``grpc-status`` 0, one uncompressed message.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import unquote

import grpc
import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 1, 2, 3, 4, 5
DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1
MIN_FRAME_SIZE = 16_384  # every peer accepts frames this large, so requests are cut once, up front
MAX_STREAM_ID = 2**31 - 1
SETTINGS_TIMEOUT_S = 30.0
CACHED_BLOCKS = 64
CLOSE_TIMEOUT_S = 5.0
_STATUS_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame: 9-byte header (length, type, flags, stream id) and payload."""
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big") + payload


def grpc_error(status: bytes, message: bytes | None) -> str:
    """``NAME: message`` as the grpcio path reports it (the message is percent-encoded on the wire)."""
    code = int(status) if status.isdigit() else -1
    name = _STATUS_NAMES.get(code) or f"grpc-status {status.decode(errors='replace')}"
    return f"{name}: {unquote((message or b'').decode('utf-8', 'replace'))}"


@dataclass(frozen=True)
class PreparedCall:
    """A request message cut into DATA frame payloads (the 5-byte gRPC prefix included)."""

    chunks: tuple[bytes, ...]
    size: int  # bytes of flow-controlled data, all chunks together

    @classmethod
    def of(cls, message: bytes) -> PreparedCall:
        data = b"\x00" + len(message).to_bytes(4, "big") + message
        chunks = tuple(data[i : i + MIN_FRAME_SIZE] for i in range(0, len(data), MIN_FRAME_SIZE))
        return cls(chunks, len(data))


class Reply(NamedTuple):
    """A call's outcome: ``error`` is None and ``message`` the serialized response, or the error's text."""

    error: str | None
    message: bytes = b""


class _Call:
    """One stream in flight: its future, the response so far, its send window."""

    __slots__ = ("future", "http_status", "data", "send_window", "pending")

    def __init__(self, future: asyncio.Future[Reply], send_window: int) -> None:
        self.future = future
        self.http_status: bytes | None = None
        self.data: list[bytes] = []
        self.send_window = send_window
        self.pending: deque[tuple[bytes, bool]] = deque()  # DATA payloads waiting for window, end flag


class _HeaderBlocks:
    """Request header blocks: the first one on a connection teaches the server's HPACK table the
    headers, every later one refers to them by index (what grpcio and perf_analyzer send too)."""

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self._headers = headers
        self._encoder = hpack.Encoder()
        self._repeat: bytes | None = None

    def resize(self, size: int) -> None:
        """The server's SETTINGS_HEADER_TABLE_SIZE: a fresh encoder announces the new size and
        refers only to entries it inserts itself, which stay at the front of the server's table."""
        self._encoder = hpack.Encoder()
        self._encoder.header_table_size = min(size, self._encoder.header_table_size)
        self._repeat = None

    def next_block(self) -> bytes:
        if self._repeat is not None:
            return self._repeat
        first = self._encoder.encode(self._headers)
        table = self._encoder.header_table.dynamic_entries
        before = list(table)
        again = self._encoder.encode(self._headers)
        if list(table) == before:
            self._repeat = again  # encoding is a function of the table, which `again` leaves as it was
        else:  # a table too small to hold the headers: literals that never touch it
            plain = hpack.Encoder()
            self._repeat = plain.encode([hpack.NeverIndexedHeaderTuple(n, v) for n, v in self._headers])
        return first


class _DecodedBlocks:
    """HPACK decoding with a cache: a response block that left the decoder's table untouched
    decodes the same way until the table changes (gRPC servers repeat the same few bytes)."""

    def __init__(self) -> None:
        self._decoder = hpack.Decoder()
        self._cache: dict[bytes, dict[bytes, bytes]] = {}

    def decode(self, block: bytes) -> dict[bytes, bytes]:
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        table = self._decoder.header_table
        entries = table.dynamic_entries
        first, count, size = (entries[0] if entries else None), len(entries), table.maxsize
        headers = {bytes(name): bytes(value) for name, value in self._decoder.decode(block, raw=True)}
        if (entries[0] if entries else None) is first and len(entries) == count and table.maxsize == size:
            if len(self._cache) >= CACHED_BLOCKS:  # error trailers may differ call by call
                self._cache.clear()
            self._cache[block] = headers
        else:
            self._cache.clear()
        return headers


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection carrying many concurrent unary calls."""

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.settled: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()  # done once the socket is closed
        self.calls: dict[int, _Call] = {}
        self.closed = False
        self.next_id = 1
        self.max_streams = 2**31
        self._blocks = _HeaderBlocks(headers)
        self._decoded = _DecodedBlocks()
        self._buffer: list[bytes] = []  # received bytes of an incomplete frame
        self._buffered = 0
        self._needed = 0  # bytes that frame needs in all: parse again only once they are here
        self._header_parts: list[bytes] = []  # HEADERS + CONTINUATION fragments of one block
        self._header_stream = 0
        self._header_end = False
        self._send_window = DEFAULT_WINDOW
        self._peer_window = DEFAULT_WINDOW  # the server's initial window for new streams
        self._received = 0  # connection-level bytes not yet given back with WINDOW_UPDATE
        self._waiting: deque[int] = deque()  # streams with DATA held back by flow control

    @property
    def window(self) -> int:
        """Bytes of DATA a new stream may send before the server opens its windows further."""
        return min(self._send_window, self._peer_window)

    @property
    def usable(self) -> bool:
        return not self.closed and len(self.calls) < self.max_streams and self.next_id < MAX_STREAM_ID

    # asyncio.Protocol
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        settings = b"".join(
            key.to_bytes(2, "big") + value.to_bytes(4, "big")
            for key, value in ((ENABLE_PUSH, 0), (INITIAL_WINDOW_SIZE, MAX_WINDOW))
        )
        transport.write(
            PREFACE
            + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big"))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._shut(f"connection closed{f': {exc}' if exc else ''}", 0)
        if not self.lost.done():
            self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._buffer:
            self._buffer.append(data)
            self._buffered += len(data)
            if self._buffered < self._needed:
                return  # a large frame arriving in pieces is joined once, not once per piece
            data = b"".join(self._buffer)
            self._buffer, self._buffered, self._needed = [], 0, 0
        buffer, position, end = data, 0, len(data)
        while end - position >= 9:
            length = int.from_bytes(buffer[position : position + 3], "big")
            stop = position + 9 + length
            if stop > end:
                self._needed = stop - position
                break
            kind, flags = buffer[position + 3], buffer[position + 4]
            stream_id = int.from_bytes(buffer[position + 5 : position + 9], "big") & MAX_STREAM_ID
            payload = buffer[position + 9 : stop]
            position = stop
            if kind == DATA:
                self._on_data(stream_id, flags, payload)
            elif kind in (HEADERS, CONTINUATION):
                self._on_headers(stream_id, kind, flags, payload)
            else:
                self._on_control(kind, flags, stream_id, payload)
        if position < end:
            self._buffer, self._buffered = [buffer[position:]], end - position
        if self._received > MAX_WINDOW // 2 and self.transport is not None:
            self.transport.write(frame(WINDOW_UPDATE, 0, 0, self._received.to_bytes(4, "big")))
            self._received = 0

    # frames in
    def _on_data(self, stream_id: int, flags: int, payload: bytes) -> None:
        self._received += len(payload)  # padding included: it counts against the window
        if flags & PADDED:
            payload = payload[1 : len(payload) - payload[0]]
        call = self.calls.get(stream_id)
        if call is not None:
            call.data.append(payload)
            if flags & END_STREAM:
                self._finish(stream_id, "stream ended without grpc-status trailers")

    def _on_headers(self, stream_id: int, kind: int, flags: int, payload: bytes) -> None:
        if kind == HEADERS:
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            if flags & PRIORITY:
                payload = payload[5:]
            self._header_stream, self._header_end = stream_id, bool(flags & END_STREAM)
        self._header_parts.append(payload)
        if not flags & END_HEADERS:
            return
        block = self._header_parts[0] if len(self._header_parts) == 1 else b"".join(self._header_parts)
        self._header_parts = []
        headers = self._decoded.decode(block)  # always: the decoder's table must see every block
        call = self.calls.get(self._header_stream)
        if call is None:
            return
        status = headers.get(b":status")
        if status is not None:
            call.http_status = status
        if self._header_end:
            self._finish(self._header_stream, self._verdict(call, headers))

    def _on_control(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        assert self.transport is not None
        if kind == SETTINGS and not flags & ACK:
            for offset in range(0, len(payload) - 5, 6):
                self._setting(int.from_bytes(payload[offset : offset + 2], "big"), payload[offset + 2 : offset + 6])
            self.transport.write(frame(SETTINGS, ACK, 0))
            if not self.settled.done():
                self.settled.set_result(None)
            self._pump()
        elif kind == PING and not flags & ACK:
            self.transport.write(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & MAX_WINDOW
            if stream_id == 0:
                self._send_window += increment
            elif (call := self.calls.get(stream_id)) is not None:
                call.send_window += increment
            self._pump()
        elif kind == RST_STREAM:
            self._finish(stream_id, f"stream reset by the server (HTTP/2 error {int.from_bytes(payload[:4], 'big')})")
        elif kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & MAX_STREAM_ID
            code = int.from_bytes(payload[4:8], "big")
            reason = payload[8:].decode("utf-8", "replace")
            self._shut(f"connection closed by the server (GOAWAY {code}{f': {reason}' if reason else ''})", last)

    def _setting(self, key: int, raw: bytes) -> None:
        value = int.from_bytes(raw, "big")
        if key == HEADER_TABLE_SIZE:
            self._blocks.resize(value)
        elif key == MAX_CONCURRENT_STREAMS:
            self.max_streams = value
        elif key == INITIAL_WINDOW_SIZE:
            for call in self.calls.values():
                call.send_window += value - self._peer_window
            self._peer_window = value

    # verdicts
    def _verdict(self, call: _Call, trailers: dict[bytes, bytes]) -> Reply:
        """The response message of a good call, else what was wrong with it."""
        if call.http_status != b"200":
            return Reply(f"HTTP {(call.http_status or b'?').decode(errors='replace')} from a gRPC endpoint")
        status = trailers.get(b"grpc-status")
        if status is None:
            return Reply("response without grpc-status")
        if status != b"0":
            return Reply(grpc_error(status, trailers.get(b"grpc-message")))
        data = call.data[0] if len(call.data) == 1 else b"".join(call.data)
        if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
            return Reply(f"malformed response message ({len(data)} bytes, not one uncompressed gRPC message)")
        return Reply(None, data[5:])

    def _finish(self, stream_id: int, reply: Reply | str) -> None:
        call = self.calls.pop(stream_id, None)
        if call is not None and not call.future.done():
            call.future.set_result(reply if isinstance(reply, Reply) else Reply(reply))

    def _shut(self, reason: str, last_stream: int) -> None:
        """No new streams; streams the server will not answer (above ``last_stream``) fail."""
        self.closed = True
        for stream_id in [s for s in self.calls if s > last_stream]:
            self._finish(stream_id, reason)
        if not self.settled.done():
            self.settled.set_exception(ConnectionError(reason))

    # frames out
    def call(self, prepared: PreparedCall) -> asyncio.Future[Reply]:
        assert self.transport is not None
        stream_id, self.next_id = self.next_id, self.next_id + 2
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        call = self.calls[stream_id] = _Call(future, self._peer_window)
        sid = stream_id.to_bytes(4, "big")
        block = self._blocks.next_block()
        parts = [len(block).to_bytes(3, "big"), bytes((HEADERS, END_HEADERS)), sid, block]
        last = len(prepared.chunks) - 1
        if not self._waiting and prepared.size <= self.window:
            for index, chunk in enumerate(prepared.chunks):
                parts += (len(chunk).to_bytes(3, "big"), bytes((DATA, END_STREAM if index == last else 0)), sid, chunk)
            self._send_window -= prepared.size
            call.send_window -= prepared.size
            self.transport.write(b"".join(parts))
            return future
        self.transport.write(b"".join(parts))  # the data waits for the server to open its window
        call.pending.extend((chunk, index == last) for index, chunk in enumerate(prepared.chunks))
        self._waiting.append(stream_id)
        self._pump()
        return future

    def _pump(self) -> None:
        """Send held-back DATA, first stream first, as far as the flow-control windows allow."""
        assert self.transport is not None
        while self._waiting:
            stream_id = self._waiting[0]
            call = self.calls.get(stream_id)
            while call is not None and call.pending:
                chunk, ends = call.pending[0]
                if len(chunk) > min(self._send_window, call.send_window):
                    return
                call.pending.popleft()
                self._send_window -= len(chunk)
                call.send_window -= len(chunk)
                self.transport.write(frame(DATA, END_STREAM if ends else 0, stream_id, chunk))
            self._waiting.popleft()


class RawGrpcClient:
    """Unary calls to one gRPC method over a pool of HTTP/2 connections (one until the server's
    stream limit is reached, another when one is closed)."""

    def __init__(
        self,
        host: str,
        port: int,
        method: str,
        metadata: list[tuple[str, str]],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.ssl = ssl_context
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["h2"])
        self._headers = [
            (b":method", b"POST"),
            (b":scheme", b"https" if ssl_context is not None else b"http"),
            (b":path", method.encode()),
            (b":authority", f"{f'[{host}]' if ':' in host else host}:{port}".encode()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            (b"user-agent", b"ferry-client-perf"),
            *((name.lower().encode(), value.encode()) for name, value in metadata),
        ]
        self._connections: list[_Connection] = []
        self._opening: asyncio.Task[_Connection] | None = None

    async def _connection(self) -> _Connection:
        while True:
            for connection in self._connections:
                if connection.usable:
                    return connection
            self._connections = [c for c in self._connections if not c.closed or c.calls]
            if self._opening is None:
                self._opening = asyncio.ensure_future(self._open())
                self._opening.add_done_callback(lambda _: setattr(self, "_opening", None))
            await asyncio.shield(self._opening)

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        headers = self._headers
        _, connection = await loop.create_connection(lambda: _Connection(headers), self.host, self.port, ssl=self.ssl)
        try:  # the server's SETTINGS set the windows and table size the calls use
            await asyncio.wait_for(connection.settled, SETTINGS_TIMEOUT_S)
        except BaseException:
            if connection.transport is not None:
                connection.transport.close()
            raise
        self._connections.append(connection)
        return connection

    async def call(self, prepared: PreparedCall) -> Reply:
        """The reply: its ``error`` is None when the call succeeded."""
        connection = await self._connection()
        return await connection.call(prepared)

    async def close(self) -> None:
        """Close every socket now and wait until it is: a TLS close would wait up to 30 s for the
        server's close_notify, which grpc servers did not send here, holding the connection open."""
        for connection in self._connections:
            if connection.transport is not None:
                connection.transport.abort()
        if self._connections:
            await asyncio.wait([c.lost for c in self._connections], timeout=CLOSE_TIMEOUT_S)
        self._connections = []
