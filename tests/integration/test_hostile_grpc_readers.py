"""gRPC clients that never read their answers (issue 24): an answer grpc has not yet written counts
against ``--max-inflight-bytes``, unary or streamed, and a call whose client does not take a
response within ``--grpc-write-timeout-secs`` (plus 1 s per MiB) is ended alone, which frees it.

The attack is real: a raw HTTP/2 peer (``tests/raw_grpc_peer.py``, from 127.0.0.2, another
address than the well-behaved client) sends 4 KiB requests whose answers are 2 MiB, and never
grants flow-control window beyond HTTP/2's initial 64 KiB, so grpc can never finish writing them.
It answers pings and settings like any live client, so only the write deadline can end it. The
server's own metrics show the bytes held; the attacker sees each stalled call ended
(DEADLINE_EXCEEDED, RST_STREAM) while its connection, and the calls on it that it does read, go
on. Both process modes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from ferry_client.protocol import grpc_service_pb2 as pb

from ..conftest import RunningServer, start_server
from ..models import write_tile_model
from ..raw_grpc_peer import RawPeer
from ..server_metrics import wait_for_metric

pytestmark = pytest.mark.timeout(120)

ROWS, WIDTH = 512, 1024
ANSWER = ROWS * WIDTH * 4  # 2 MiB
WRITE_TIMEOUT_S = 2  # + 2 s for the 2 MiB answer
ATTACKER = "127.0.0.2"
DEADLINE_EXCEEDED = str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def readers(request, tmp_path_factory) -> Iterator[tuple[RunningServer, int]]:
    repo = tmp_path_factory.mktemp("hostile_grpc_readers") / "models"
    write_tile_model(repo / "tile", rows=ROWS, width=WIDTH)
    processes = 2 if request.param == "2 intake processes" else 1
    extra = ["--intake-processes", "2"] if processes == 2 else []
    # no stream turns: a stream then reads its next request without waiting for its last answer to be
    # written, so an unread stream holds the most answers it can (with turns, the default, just one)
    running = start_server(
        repo,
        repo.parent / "server.log",
        *("--grpc-write-timeout-secs", str(WRITE_TIMEOUT_S), "--grpc-stream-reads-per-peer", "0"),
        *extra,
    )
    yield running, processes
    running.stop()


def _request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="tile")
    request.inputs.add(name="x", datatype="FP32", shape=[1, WIDTH])
    request.raw_input_contents.append(np.ones((1, WIDTH), np.float32).tobytes())
    return request


Connect = Callable[..., Awaitable[RawPeer]]


@pytest.fixture
async def connect(readers) -> AsyncIterator[Connect]:
    """Opens raw connections to the server (``RawPeer``'s arguments) from the attacker's address;
    closes them after the test, so no call of one test is left to the next."""
    server, _ = readers
    opened: list[RawPeer] = []

    async def open_one(
        stalled: Collection[int] = (1,), reads_others: bool = False, endings: list[tuple[RawPeer, int]] | None = None
    ) -> RawPeer:
        loop = asyncio.get_running_loop()
        _, peer = await loop.create_connection(
            lambda: RawPeer(_request().SerializeToString(), stalled, reads_others, endings),
            "127.0.0.1",
            server.grpc_port,
            local_addr=(ATTACKER, 0),
        )
        opened.append(peer)
        return peer

    yield open_one
    for peer in opened:
        if peer.transport is not None:
            peer.transport.close()
    await asyncio.wait_for(asyncio.gather(*(peer.closed for peer in opened)), timeout=10)


def _others_are_served(server: RunningServer) -> None:
    """A well-behaved client's call (from 127.0.0.1) while the attack holds: answered, and right."""
    client = triton_grpc.InferenceServerClient(server.grpc_url)
    x = np.full((1, WIDTH), 2.0, np.float32)
    inputs = [triton_grpc.InferInput("x", [1, WIDTH], "FP32")]
    inputs[0].set_data_from_numpy(x)
    answer = client.infer("tile", inputs).as_numpy("y")
    client.close()
    np.testing.assert_array_equal(answer, np.broadcast_to(x, (ROWS, WIDTH)))


def _ended_late(peer: RawPeer, stream: int) -> bool:
    """``stream`` was ended by the server for its unread answer: DEADLINE_EXCEEDED, then RST_STREAM."""
    trailers = peer.trailers.get(stream)
    return trailers is not None and stream in peer.resets and trailers["grpc-status"] == DEADLINE_EXCEEDED


async def _held_then_cut(
    server: RunningServer, connect: Connect, peers: list[RawPeer], at_least: int, endings: list[tuple[RawPeer, int]]
) -> None:
    """The attack state (``at_least`` bytes held; a call another client sends then is answered
    right), then each stalled call ended alone (its connection stays open) and 0 held. Not before
    its deadline: a call opened after them (its message never sent), whose client gave it 1 s of its
    own (grpc ends it then), ends first. (Whether the other client's answer came before the cut is
    not asked: on a busy machine its call can outlast the 4 s the attack is held, with no fault.)"""
    log_before = len(server.log())
    reference = await connect(endings=endings)
    reference.call(1, "ModelInfer", 0, end=False, timeout="1S")
    await wait_for_metric(server, "ferry_inflight_bytes", at_least, timeout=30)
    assert all(peer.received.get(1, 0) < ANSWER for peer in peers)  # none of the answers was taken
    await asyncio.to_thread(_others_are_served, server)
    await asyncio.gather(*(peer.until(lambda peer=peer: _ended_late(peer, 1)) for peer in peers))
    assert endings[0] == (reference, 1), [(peer is reference, stream) for peer, stream in endings]
    await wait_for_metric(server, "ferry_inflight_bytes", 0, timeout=30, at_most=True)
    assert not any(peer.closed.done() for peer in peers)  # the call was ended, not the connection
    log = server.log()[log_before:]
    assert f"ended a gRPC call of ipv4:{ATTACKER}" in log
    assert "the response was not taken within" in log
    assert "connection(s) of" not in log and "ExecuteBatchError" not in log


async def test_unread_unary_answers_are_counted_then_cut(readers, connect: Connect) -> None:
    server, _ = readers
    endings: list[tuple[RawPeer, int]] = []
    peers = [await connect(endings=endings) for _ in range(3)]
    for peer in peers:
        peer.call(1, "ModelInfer", 1)
    await _held_then_cut(server, connect, peers, 3 * ANSWER, endings)


async def test_unread_stream_answers_are_counted_then_cut(readers, connect: Connect) -> None:
    server, _ = readers
    endings: list[tuple[RawPeer, int]] = []
    peer = await connect(endings=endings)
    peer.call(1, "ModelStreamInfer", 4)
    # all four answers wait: in the stream's buffer or being written
    await _held_then_cut(server, connect, [peer], 4 * ANSWER, endings)


async def test_only_the_stalled_calls_of_a_connection_are_cut(readers, connect: Connect) -> None:
    """One connection: a stream (1) it reads, opened and answered first, then a unary call (3) and
    a stream (5) whose answers it never reads. The stalled two are ended; stream 1, open all along
    (it was before they began, whenever their deadline comes), goes on after the cut, and a new
    call (7) on the same connection is answered."""
    server, _ = readers
    log_before = len(server.log())
    peer = await connect(stalled=(3, 5), reads_others=True)
    peer.call(1, "ModelStreamInfer", 1, end=False)
    await peer.until(lambda: len(peer.messages(1)) == 1)
    peer.call(3, "ModelInfer", 1)
    peer.call(5, "ModelStreamInfer", 1, end=False)
    await wait_for_metric(server, "ferry_inflight_bytes", 2 * ANSWER, timeout=30)
    assert peer.received.get(3, 0) < ANSWER and peer.received.get(5, 0) < ANSWER  # both stalled

    await peer.until(lambda: _ended_late(peer, 3) and _ended_late(peer, 5))
    await wait_for_metric(server, "ferry_inflight_bytes", 0, timeout=30, at_most=True)
    assert not peer.closed.done()

    peer.send(1, 1, end=True)  # the stream that was open all along
    peer.call(7, "ModelInfer", 1)  # and a new call on the same connection
    await peer.until(lambda: 1 in peer.trailers and 7 in peer.trailers)
    for stream in (1, 7):
        assert peer.trailers[stream]["grpc-status"] == "0", peer.trailers[stream]
    expected = np.ones((ROWS, WIDTH), np.float32)
    for answer in peer.messages(1):
        stream_answer = pb.ModelStreamInferResponse.FromString(answer)
        assert not stream_answer.error_message
        np.testing.assert_array_equal(_output(stream_answer.infer_response), expected)
    assert len(peer.messages(1)) == 2
    (unary_answer,) = peer.messages(7)
    np.testing.assert_array_equal(_output(pb.ModelInferResponse.FromString(unary_answer)), expected)
    assert not peer.closed.done() and 1 not in peer.resets and 7 not in peer.resets
    log = server.log()[log_before:]
    assert log.count(f"ended a gRPC call of ipv4:{ATTACKER}") == 2
    assert "connection(s) of" not in log and "ExecuteBatchError" not in log


def _output(answer: pb.ModelInferResponse) -> np.ndarray:
    return np.frombuffer(answer.raw_output_contents[0], np.float32).reshape(ROWS, WIDTH)
