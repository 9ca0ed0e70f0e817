"""A raw HTTP/2 gRPC client that stalls the answers of chosen streams, deterministically.

It grants no flow-control window for a stalled stream beyond HTTP/2's initial 64 KiB, so gRPC can
never finish writing a larger answer there, while it may read other streams of the same
connection normally. Frames are built by hand (``ferry_client.perf.rawgrpc.frame``) and header
blocks go through hpack; every header block the server sends fits one frame here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

import hpack

from ferry_client.perf.rawgrpc import frame

DATA, HEADERS, RST_STREAM, SETTINGS, PING, WINDOW_UPDATE = 0, 1, 3, 4, 6, 8
END_STREAM, END_HEADERS, ACK = 1, 4, 1


def call_headers(encoder: hpack.Encoder, method: str, timeout: str | None = None) -> bytes:
    """The header block that opens a call of ``/inference.GRPCInferenceService/{method}``; ``timeout``:
    the client's own deadline, as gRPC writes it ("1S")."""
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", f"/inference.GRPCInferenceService/{method}"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    return encoder.encode(headers + ([("grpc-timeout", timeout)] if timeout else []))


class RawPeer(asyncio.Protocol):
    """One HTTP/2 connection that sends gRPC requests and never grants window for the answers of
    its ``stalled`` streams; with ``reads_others``, it reads every other stream's answers as they
    come (granting their window, and the connection's for all data), as a client reading one call
    while another stalls. It answers pings and settings like any live client, so only the server's
    write deadline can end a stalled call. ``endings``: where each stream's end (trailers or reset)
    is recorded as (peer, stream), in the order they came, shared by several peers."""

    def __init__(
        self,
        message: bytes,
        stalled: Collection[int] = (),
        reads_others: bool = False,
        endings: list[tuple[RawPeer, int]] | None = None,
    ) -> None:
        self.message = message  # every request sends this message
        self.endings = endings if endings is not None else []
        self.stalled = set(stalled)
        self.reads_others = reads_others
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.buffer = bytearray()
        self.received: dict[int, int] = {}  # stream -> bytes of DATA
        self.data: dict[int, bytearray] = {}  # stream -> DATA of the streams read
        self.trailers: dict[int, dict[str, str]] = {}
        self.resets: dict[int, int] = {}  # stream -> RST_STREAM error code
        self.changed = asyncio.Event()
        self.closed = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0))

    def connection_lost(self, exc) -> None:
        self.closed.set_result(True)
        self.changed.set()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        start = 0  # frames are read by offset and dropped at the end (no copy of the rest per frame)
        while len(buffer) - start >= 9:
            length = int.from_bytes(buffer[start : start + 3], "big")
            if len(buffer) - start < 9 + length:
                break
            kind, flags = buffer[start + 3], buffer[start + 4]
            stream = int.from_bytes(buffer[start + 5 : start + 9], "big")
            payload = bytes(buffer[start + 9 : start + 9 + length])
            start += 9 + length
            self._frame(kind, flags, stream, payload)
        del buffer[:start]

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        """Acts on one frame the server sent."""
        length = len(payload)
        assert self.transport is not None
        if kind == SETTINGS and not flags & ACK:
            self.transport.write(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self.transport.write(frame(PING, ACK, 0, payload))
        elif kind == DATA:
            self.received[stream] = self.received.get(stream, 0) + length
            if self.reads_others and length:
                self.transport.write(frame(WINDOW_UPDATE, 0, 0, length.to_bytes(4, "big")))
                if stream not in self.stalled:
                    self.data.setdefault(stream, bytearray()).extend(payload)
                    self.transport.write(frame(WINDOW_UPDATE, 0, stream, length.to_bytes(4, "big")))
        elif kind == HEADERS and flags & END_STREAM:  # trailers (every header block fits one frame here)
            self.trailers[stream] = {k: v for k, v in self.decoder.decode(payload) if k.startswith("grpc-")}
            self._ended(stream)
        elif kind == HEADERS:
            self.decoder.decode(payload)  # keeps the decoder's table in step
        elif kind == RST_STREAM:
            self.resets[stream] = int.from_bytes(payload, "big")
            self._ended(stream)
        self.changed.set()

    def _ended(self, stream: int) -> None:
        if (self, stream) not in self.endings:
            self.endings.append((self, stream))

    def call(
        self, stream: int, method: str, requests: int, end: bool | None = None, timeout: str | None = None
    ) -> None:
        """Open ``stream`` to ``/inference.GRPCInferenceService/{method}`` (with the client's deadline
        ``timeout``) and send ``requests`` messages, then the end of the stream when ``end`` (by
        default: for ``ModelInfer``)."""
        assert self.transport is not None
        self.transport.write(frame(HEADERS, END_HEADERS, stream, call_headers(self.encoder, method, timeout)))
        self.send(stream, requests, method == "ModelInfer" if end is None else end)

    def send(self, stream: int, requests: int, end: bool = False) -> None:
        assert self.transport is not None
        message = self.message
        for index in range(requests):
            body = b"\0" + len(message).to_bytes(4, "big") + message
            self.transport.write(frame(DATA, END_STREAM if end and index == requests - 1 else 0, stream, body))

    async def until(self, condition: Callable[[], bool], timeout: float = 30) -> None:
        """Wait (on what the server sends, never on time) until ``condition`` holds; fails at once
        when the connection is closed first."""

        async def wait() -> None:
            while not condition():
                assert not self.closed.done(), "the server closed the connection"
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), timeout)

    def messages(self, stream: int) -> list[bytes]:
        """The whole gRPC messages read on ``stream`` so far."""
        data, found, start = self.data.get(stream, bytearray()), [], 0
        while len(data) - start >= 5 and len(data) - start >= 5 + int.from_bytes(data[start + 1 : start + 5], "big"):
            size = int.from_bytes(data[start + 1 : start + 5], "big")
            found.append(bytes(data[start + 5 : start + 5 + size]))
            start += 5 + size
        return found
