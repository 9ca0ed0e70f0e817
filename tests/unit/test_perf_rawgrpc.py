"""The raw gRPC engine's HTTP/2 handling, frame by frame: what a server rarely does on purpose
(GOAWAY, RST_STREAM, padding, CONTINUATION, a tiny window, a changed table size) is fed in as bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import hpack
import pytest

from ferry_client.perf import rawgrpc
from ferry_client.perf.rawgrpc import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    PreparedCall,
    frame,
)

REQUEST_HEADERS = [(b":method", b"POST"), (b":path", b"/inference.GRPCInferenceService/ModelInfer"), (b"x-k", b"v")]


class Transport:
    """Records what the connection writes."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        """(type, flags, stream, payload) of every frame written after the preface."""
        data = bytes(self.written)
        assert data.startswith(rawgrpc.PREFACE)
        position, out = len(rawgrpc.PREFACE), []
        while position < len(data):
            length = int.from_bytes(data[position : position + 3], "big")
            stream = int.from_bytes(data[position + 5 : position + 9], "big")
            out.append((data[position + 3], data[position + 4], stream, data[position + 9 : position + 9 + length]))
            position += 9 + length
        return out


def settings(*pairs: tuple[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in pairs))


def message(payload: bytes = b"answer") -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def run(test: Callable[[rawgrpc._Connection, Transport, hpack.Encoder], object], *server_settings) -> None:
    """A settled connection on a recording transport; ``test`` may be a coroutine function."""

    async def main() -> None:
        connection = rawgrpc._Connection(REQUEST_HEADERS)
        transport = Transport()
        connection.connection_made(transport)
        connection.data_received(settings(*server_settings))
        await connection.settled
        result = test(connection, transport, hpack.Encoder())
        if asyncio.iscoroutine(result):
            await result

    asyncio.run(main())


def respond(encoder: hpack.Encoder, stream: int, *trailers: tuple[bytes, bytes], body: bytes | None = None) -> bytes:
    headers = frame(HEADERS, END_HEADERS, stream, encoder.encode([(b":status", b"200")]))
    data = frame(DATA, 0, stream, message() if body is None else body)
    return headers + data + frame(HEADERS, END_HEADERS | END_STREAM, stream, encoder.encode(list(trailers)))


def test_a_good_call_and_what_the_connection_sends() -> None:
    async def test(connection, transport, encoder) -> None:
        future = connection.call(PreparedCall.of(b"request"))
        connection.data_received(respond(encoder, 1, (b"grpc-status", b"0")))
        assert await future == rawgrpc.Reply(None, b"answer")
        kinds = [(kind, flags, stream) for kind, flags, stream, _ in transport.frames()]
        assert kinds[:2] == [(SETTINGS, 0, 0), (WINDOW_UPDATE, 0, 0)]  # ours, then the server's acknowledged:
        assert kinds[2:] == [(SETTINGS, ACK, 0), (HEADERS, END_HEADERS, 1), (DATA, END_STREAM, 1)]
        assert transport.frames()[-1][3] == message(b"request")

    run(test)


def test_repeated_header_blocks_decode_to_the_same_headers() -> None:
    """The first block inserts into the server's table; later ones only refer to it, and stay valid."""

    async def test(connection, transport, encoder) -> None:
        for _ in range(3):
            connection.call(PreparedCall.of(b""))
        blocks = [payload for kind, _, _, payload in transport.frames() if kind == HEADERS]
        decoder = hpack.Decoder()  # the server's side
        assert [decoder.decode(b, raw=True) for b in blocks] == [REQUEST_HEADERS] * 3
        assert blocks[1] == blocks[2] and len(blocks[1]) < len(blocks[0])

    run(test)


def test_a_smaller_table_size_from_the_server_is_announced() -> None:
    async def test(connection, transport, encoder) -> None:
        connection.call(PreparedCall.of(b""))
        connection.data_received(settings((rawgrpc.HEADER_TABLE_SIZE, 0)))
        connection.call(PreparedCall.of(b""))
        connection.call(PreparedCall.of(b""))
        blocks = [payload for kind, _, _, payload in transport.frames() if kind == HEADERS]
        decoder = hpack.Decoder()
        assert decoder.decode(blocks[0], raw=True) == REQUEST_HEADERS
        decoder.max_allowed_table_size = 0  # what the server now enforces
        assert [decoder.decode(b, raw=True) for b in blocks[1:]] == [REQUEST_HEADERS] * 2
        assert decoder.header_table_size == 0

    run(test)


def test_error_status_with_padding_and_continuation() -> None:
    async def test(connection, transport, encoder) -> None:
        future = connection.call(PreparedCall.of(b""))
        padded = bytes([3]) + message() + b"\x00\x00\x00"
        block = encoder.encode([(b":status", b"200")])
        trailers = encoder.encode([(b"grpc-status", b"5"), (b"grpc-message", b"no model %27x%27")])
        connection.data_received(
            frame(HEADERS, END_HEADERS, 1, block)
            + frame(DATA, PADDED, 1, padded)
            + frame(HEADERS, END_STREAM, 1, trailers[:4])
            + frame(CONTINUATION, END_HEADERS, 1, trailers[4:])
        )
        assert await future == rawgrpc.Reply("NOT_FOUND: no model 'x'")

    run(test)


@pytest.mark.parametrize(
    "body, trailers, error",
    [
        (b"\x01" + message()[1:], [(b"grpc-status", b"0")], "malformed response message"),
        (message()[:-1], [(b"grpc-status", b"0")], "malformed response message"),
        (message(), [(b"grpc-message", b"x")], "response without grpc-status"),
        (message(), [(b"grpc-status", b"99")], "grpc-status 99: "),
    ],
)
def test_bad_responses_are_errors(body: bytes, trailers: list[tuple[bytes, bytes]], error: str) -> None:
    async def test(connection, transport, encoder) -> None:
        future = connection.call(PreparedCall.of(b""))
        connection.data_received(respond(encoder, 1, *trailers, body=body))
        reply = await future
        assert reply.error is not None and reply.error.startswith(error), reply

    run(test)


def test_http_error_and_frames_split_across_reads() -> None:
    async def test(connection, transport, encoder) -> None:
        future = connection.call(PreparedCall.of(b""))
        data = frame(HEADERS, END_HEADERS | END_STREAM, 1, encoder.encode([(b":status", b"503")]))
        for index in range(len(data)):
            connection.data_received(data[index : index + 1])
        assert await future == rawgrpc.Reply("HTTP 503 from a gRPC endpoint")

    run(test)


def test_a_large_response_arriving_in_pieces() -> None:
    async def test(connection, transport, encoder) -> None:
        future = connection.call(PreparedCall.of(b""))
        body = bytes(range(256)) * 400  # 102,400 bytes: seven DATA frames of at most 16 KiB
        framed = message(body)
        data = frame(HEADERS, END_HEADERS, 1, encoder.encode([(b":status", b"200")]))
        data += b"".join(frame(DATA, 0, 1, framed[i : i + 16_384]) for i in range(0, len(framed), 16_384))
        data += frame(HEADERS, END_HEADERS | END_STREAM, 1, encoder.encode([(b"grpc-status", b"0")]))
        for start in range(0, len(data), 1000):
            connection.data_received(data[start : start + 1000])
        assert await future == rawgrpc.Reply(None, body)

    run(test)


def test_reset_stream_goaway_and_ping() -> None:
    async def test(connection, transport, encoder) -> None:
        first, second, third = (connection.call(PreparedCall.of(b"")) for _ in range(3))
        connection.data_received(frame(PING, 0, 0, b"12345678"))
        assert transport.frames()[-1] == (PING, ACK, 0, b"12345678")
        connection.data_received(frame(RST_STREAM, 0, 3, (8).to_bytes(4, "big")))
        assert (await second).error == "stream reset by the server (HTTP/2 error 8)"
        connection.data_received(frame(GOAWAY, 0, 0, (1).to_bytes(4, "big") + (0).to_bytes(4, "big") + b"bye"))
        assert (await third).error == "connection closed by the server (GOAWAY 0: bye)"
        assert not first.done() and not connection.usable  # stream 1 is still answered
        connection.data_received(respond(encoder, 1, (b"grpc-status", b"0")))
        assert (await first).error is None

    run(test)


def test_data_waits_for_the_servers_windows() -> None:
    """A stream window of 10 bytes, then the connection's 65,535: DATA goes out as far as both allow."""

    async def test(connection, transport, encoder) -> None:
        future = connection.call(PreparedCall.of(b"x" * 70_000))  # 70,005 bytes: 4 x 16,384 + 4,469
        sent = lambda: [(f, len(p)) for k, f, s, p in transport.frames() if k == DATA]  # noqa: E731
        assert sent() == [] and connection.window == 10
        connection.data_received(frame(WINDOW_UPDATE, 0, 1, (1_000_000).to_bytes(4, "big")))
        assert sent() == [(0, 16_384)] * 3  # the fourth chunk is one byte over the connection window
        connection.data_received(frame(WINDOW_UPDATE, 0, 0, (100_000).to_bytes(4, "big")))
        assert sent() == [(0, 16_384)] * 4 + [(END_STREAM, 4_469)]
        connection.data_received(respond(encoder, 1, (b"grpc-status", b"0")))
        assert (await future).error is None

    run(test, (rawgrpc.INITIAL_WINDOW_SIZE, 10))


def test_the_stream_limit_makes_a_connection_unusable() -> None:
    async def test(connection, transport, encoder) -> None:
        assert connection.usable
        future = connection.call(PreparedCall.of(b""))
        assert not connection.usable
        connection.data_received(respond(encoder, 1, (b"grpc-status", b"0")))
        await future
        assert connection.usable

    run(test, (rawgrpc.MAX_CONCURRENT_STREAMS, 1))


def test_decoded_blocks_are_cached_only_while_the_table_is_unchanged() -> None:
    server, decoded = hpack.Encoder(), rawgrpc._DecodedBlocks()
    headers = [(b"grpc-status", b"0"), (b"x", b"1")]
    first, again = server.encode(headers), server.encode(headers)  # the second only refers to the table
    assert decoded.decode(first) == decoded.decode(again) == decoded.decode(again) == dict(headers)
    assert list(decoded._cache) == [again]
    assert decoded.decode(server.encode([(b"y", b"2")])) == {b"y": b"2"} and decoded._cache == {}
    assert decoded.decode(again) == {b"x": b"1", b"y": b"2"}  # the same bytes name other entries now


def _without_hpack(monkeypatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "hpack" else real_find_spec(name, *a)
    )


def test_the_engine_defaults_to_raw_only_where_hpack_is_installed(monkeypatch) -> None:
    from ferry_client.perf.wire import default_grpc_engine

    assert default_grpc_engine() == "raw"
    _without_hpack(monkeypatch)
    assert default_grpc_engine() == "grpcio"


def test_raw_engine_without_hpack_fails_before_any_request(capsys, monkeypatch) -> None:
    from ferry_client.cli import main

    _without_hpack(monkeypatch)
    # Nothing listens on port 9: had the tool tried to measure first, it would fail on the connection.
    code = main(["perf", "-m", "simple", "-i", "grpc", "-u", "127.0.0.1:9", "--grpc-engine", "raw"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "ferry-client perf: --grpc-engine raw needs hpack, which is not installed "
        "(pip install '.[perf]' in the Ferry checkout (or './clients/python[perf]' where only the client is installed))"
    )


def test_an_unknown_engine_or_address_is_refused() -> None:
    from ferry_client.perf.wire import Security, make_sender

    with pytest.raises(ValueError, match="unknown gRPC engine 'h3'"):
        make_sender("grpc", "127.0.0.1:9", "simple", "", 1, Security(), "h3")
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        make_sender("grpc", "127.0.0.1", "simple", "", 1, Security(), "raw")
