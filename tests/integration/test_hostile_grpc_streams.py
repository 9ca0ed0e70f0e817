"""A client's streams take turns to receive their request messages (issue 24), both process modes.

grpc receives a message whole before admission can see its size, and every open stream asked for
its next message as soon as it had answered the last: one client's 16 streams each sending 47 MiB
held +735 MB uncounted (over a GB with intake processes), and more streams held more. Now a stream
asks for a message only in a turn of its address (``--grpc-stream-reads-per-peer``: 1 in most tests
here, 8 by default), each message is counted from its bytes before it is parsed, and a stream idle
on a turn for ``--grpc-idle-stream-secs`` is ended once another stream of its address waits.

The attacker speaks raw HTTP/2 from 127.0.0.2 on ONE connection (so with intake processes every
stream is in the same intake, whose turns these are). What the server sends is logged frame by
frame, so the tests check the order of events, never a duration.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from ferry.front_doors import grpc_limits
from ferry.settings import Settings
from ferry_client.protocol import grpc_service_pb2 as pb

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model
from ..raw_grpc_peer import DATA, END_STREAM, HEADERS, RawPeer

pytestmark = pytest.mark.timeout(120)

ATTACKER = "127.0.0.2"
TAKEN = f"of {ATTACKER} is received in its turn"  # the server's debug line when a message takes a turn
IDLE_S = 2
CAP = 4 * 1024 * 1024  # --max-inflight-bytes: a 3 MiB message (counted twice) cannot fit


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def server(request, tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_streams") / "models"
    write_mlp_model(repo / "quick", width=16, layers=1)
    extra = ["--intake-processes", "2"] if request.param == "2 intake processes" else []
    running = start_server(
        repo,
        repo.parent / "server.log",
        *("--grpc-stream-reads-per-peer", "1", "--grpc-idle-stream-secs", str(IDLE_S)),
        *("--max-inflight-bytes", str(CAP)),
        *("--log-level", "debug"),  # says when a message takes a turn
        *extra,
    )
    yield running
    running.stop()


@pytest.fixture(scope="module", params=[1, 2], ids=["one process", "2 intake processes"])
def default_turns_server(request, tmp_path_factory) -> Iterator[tuple[RunningServer, int]]:
    """A server with the default stream turns, and how many of them one connection gets."""
    repo = tmp_path_factory.mktemp("default_stream_turns") / "models"
    write_mlp_model(repo / "quick", width=16, layers=1)
    processes = request.param
    extra = ["--intake-processes", str(processes)] if processes > 1 else []
    running = start_server(
        repo, repo.parent / "server.log", "--grpc-idle-stream-secs", str(IDLE_S), "--log-level", "debug", *extra
    )
    # a connection is served by one process, whose share of the turns it gets
    yield running, grpc_limits(Settings(), processes).stream_reads_per_peer
    running.stop()


def _request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="quick")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
    return request


class LoggingPeer(RawPeer):
    """A RawPeer that also logs, in the order they arrive, the answers' data and the trailers."""

    def __init__(self, message: bytes) -> None:
        super().__init__(message, reads_others=True)
        self.log: list[tuple[str, int]] = []

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == DATA and payload:
            self.log.append(("data", stream))
        elif kind == HEADERS and flags & END_STREAM:
            self.log.append(("end", stream))
        super()._frame(kind, flags, stream, payload)


def _answers(peer: RawPeer, stream: int) -> list[pb.ModelStreamInferResponse]:
    return [pb.ModelStreamInferResponse.FromString(m) for m in peer.messages(stream)]


async def test_a_stream_idle_on_the_turn_gives_way_to_a_waiting_one(server: RunningServer) -> None:
    loop = asyncio.get_running_loop()
    _, peer = await loop.create_connection(
        lambda: LoggingPeer(_request().SerializeToString()), "127.0.0.1", server.grpc_port, local_addr=(ATTACKER, 0)
    )
    assert isinstance(peer, LoggingPeer)
    try:
        # stream 1 is answered, then asks for its next message: it holds the address's one turn, idle
        since = len(server.log())
        peer.call(1, "ModelStreamInfer", 1, end=False)
        await peer.until(lambda: len(peer.messages(1)) == 1)
        await server.said(TAKEN, 2, since)  # its first message's turn, then the next one's
        # a unary call of the same address is not held up by it (its turns are a pool of their own)
        peer.call(3, "ModelInfer", 1)
        await peer.until(lambda: 3 in peer.trailers)
        assert peer.trailers[3]["grpc-status"] == "0"
        # stream 5 sends a message: it waits for the turn until the idle stream 1 is ended
        peer.call(5, "ModelStreamInfer", 1, end=False)
        await peer.until(lambda: 1 in peer.trailers and len(peer.messages(5)) == 1, timeout=IDLE_S + 60)
    finally:
        assert peer.transport is not None
        peer.transport.close()
    assert peer.trailers[1]["grpc-status"] == str(grpc.StatusCode.UNAVAILABLE.value[0])
    details = peer.trailers[1].get("grpc-message", "")
    assert "--grpc-stream-reads-per-peer" in details and "--grpc-idle-stream-secs" in details, details
    assert peer.log.index(("end", 1)) < peer.log.index(("data", 5))  # answered only once 1 was ended
    for stream in (1, 5):  # both streams got their answer and nothing else
        (answer,) = _answers(peer, stream)
        assert not answer.error_message and answer.infer_response.model_name == "quick"


async def test_streams_take_turns_by_default(default_turns_server: tuple[RunningServer, int]) -> None:
    """With the default flags, one address's streams idle on all of its turns hold the next stream's
    message back (what one client's streams hold uncounted is bounded by the turns, not by how many
    streams it opens) until the idlest of them is ended; a unary call of the address goes on."""
    server, turns = default_turns_server
    assert turns >= 2  # (so that the default is not one turn, whose cost is measured in the docs)
    loop = asyncio.get_running_loop()
    _, peer = await loop.create_connection(
        lambda: LoggingPeer(_request().SerializeToString()), "127.0.0.1", server.grpc_port, local_addr=(ATTACKER, 0)
    )
    assert isinstance(peer, LoggingPeer)
    holders = [1 + 2 * index for index in range(turns)]
    unary, waiting = holders[-1] + 2, holders[-1] + 4  # (HTTP/2 stream ids only grow)
    try:
        since = len(server.log())
        for stream in holders:  # each answered, then idle on a turn, asking for its next message
            peer.call(stream, "ModelStreamInfer", 1, end=False)
        await peer.until(lambda: all(len(peer.messages(stream)) == 1 for stream in holders))
        await server.said(TAKEN, 2 * turns, since)  # each one's first message's turn, then its next one's
        peer.call(unary, "ModelInfer", 1)
        await peer.until(lambda: unary in peer.trailers)
        assert peer.trailers[unary]["grpc-status"] == "0"
        peer.call(waiting, "ModelStreamInfer", 1, end=False)
        await peer.until(lambda: len(peer.messages(waiting)) == 1, timeout=IDLE_S + 60)
    finally:
        assert peer.transport is not None
        peer.transport.close()
    ended = [stream for stream in holders if stream in peer.trailers]
    assert len(ended) >= 1, peer.trailers
    first_end = min(peer.log.index(("end", stream)) for stream in ended)
    assert first_end < peer.log.index(("data", waiting))  # answered only once an idle one was ended
    for stream in ended:
        assert peer.trailers[stream]["grpc-status"] == str(grpc.StatusCode.UNAVAILABLE.value[0])
        assert "--grpc-stream-reads-per-peer" in peer.trailers[stream].get("grpc-message", "")


async def test_a_streamed_message_is_counted_from_its_bytes_before_it_is_parsed(server: RunningServer) -> None:
    """3 MiB of invalid bytes need 6 MiB counted (bytes and parsed copy): refused as too large for
    the 4 MiB cap, unparsed, as an error answer to that request; the stream goes on. Parsed first,
    they ended the whole stream with INVALID_ARGUMENT."""
    async with grpc.aio.insecure_channel(server.grpc_url) as channel:
        stream = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )()
        await stream.write(b"\xff" * (3 * 1024 * 1024))
        refused = await stream.read()
        assert "--max-inflight-bytes" in refused.error_message, refused
        for _ in range(3):
            await stream.write(_request().SerializeToString())
            answer = await stream.read()
            assert not answer.error_message and answer.infer_response.model_name == "quick", answer
        await stream.done_writing()
        assert await stream.read() is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK
