"""gRPC clients that never read their answers (issue 24): an answer grpc has not yet written counts
against ``--max-inflight-bytes``, unary or streamed, and a client that does not take a response
within ``--grpc-write-timeout-secs`` (plus 1 s per MiB) has its connection closed, which frees it.

The attack is real: a raw HTTP/2 peer (from 127.0.0.2, another address than the well-behaved
client) sends 4 KiB requests whose answers are 2 MiB, and never grants flow-control window beyond
HTTP/2's initial 64 KiB, so grpc can never finish writing them. It answers pings and settings like
any live client, so only the write deadline can end it. The server's own metrics show the bytes
held; the attacker sees its connection closed. Both process modes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import hpack
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from ferry_client.perf.rawgrpc import frame
from ferry_client.protocol import grpc_service_pb2 as pb

from ..conftest import RunningServer, start_server
from ..models import write_tile_model
from ..server_metrics import metric, scrape, wait_for_metric

pytestmark = pytest.mark.timeout(120)

ROWS, WIDTH = 512, 1024
ANSWER = ROWS * WIDTH * 4  # 2 MiB
WRITE_TIMEOUT_S = 2  # + 2 s for the 2 MiB answer
ATTACKER = "127.0.0.2"
DATA, HEADERS, SETTINGS, PING = 0, 1, 4, 6
END_STREAM, END_HEADERS, ACK = 1, 4, 1


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def readers(request, tmp_path_factory) -> Iterator[tuple[RunningServer, int]]:
    repo = tmp_path_factory.mktemp("hostile_grpc_readers") / "models"
    write_tile_model(repo / "tile", rows=ROWS, width=WIDTH)
    processes = 2 if request.param == "2 intake processes" else 1
    extra = ["--intake-processes", "2"] if processes == 2 else []
    running = start_server(repo, repo.parent / "server.log", "--grpc-write-timeout-secs", str(WRITE_TIMEOUT_S), *extra)
    yield running, processes
    running.stop()


class NeverReads(asyncio.Protocol):
    """One HTTP/2 connection that sends gRPC requests and never grants window for their answers."""

    def __init__(self) -> None:
        self.encoder = hpack.Encoder()
        self.buffer = b""
        self.received = 0
        self.closed = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0))

    def connection_lost(self, exc) -> None:
        self.closed.set_result(True)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                return
            kind, flags = self.buffer[3], self.buffer[4]
            payload, self.buffer = self.buffer[9 : 9 + length], self.buffer[9 + length :]
            assert self.transport is not None
            if kind == SETTINGS and not flags & ACK:
                self.transport.write(frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                self.transport.write(frame(PING, ACK, 0, payload))
            elif kind == DATA:
                self.received += length  # and no WINDOW_UPDATE, ever

    def call(self, stream: int, method: str, requests: int) -> None:
        """Open ``stream`` and send ``requests`` messages (a unary call: one, then the end of the stream)."""
        assert self.transport is not None
        block = self.encoder.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", f"/inference.GRPCInferenceService/{method}"),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )
        self.transport.write(frame(HEADERS, END_HEADERS, stream, block))
        message = _request().SerializeToString()
        for index in range(requests):
            last = method == "ModelInfer" and index == requests - 1
            body = b"\0" + len(message).to_bytes(4, "big") + message
            self.transport.write(frame(DATA, END_STREAM if last else 0, stream, body))


def _request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="tile")
    request.inputs.add(name="x", datatype="FP32", shape=[1, WIDTH])
    request.raw_input_contents.append(np.ones((1, WIDTH), np.float32).tobytes())
    return request


async def _connect(server: RunningServer) -> NeverReads:
    loop = asyncio.get_running_loop()
    _, peer = await loop.create_connection(NeverReads, "127.0.0.1", server.grpc_port, local_addr=(ATTACKER, 0))
    return peer


def _others_are_served(server: RunningServer) -> float:
    """A well-behaved client's call (from 127.0.0.1) while the attack holds; returns its latency."""
    started = time.monotonic()
    client = triton_grpc.InferenceServerClient(server.grpc_url)
    x = np.full((1, WIDTH), 2.0, np.float32)
    inputs = [triton_grpc.InferInput("x", [1, WIDTH], "FP32")]
    inputs[0].set_data_from_numpy(x)
    answer = client.infer("tile", inputs).as_numpy("y")
    client.close()
    np.testing.assert_array_equal(answer, np.broadcast_to(x, (ROWS, WIDTH)))
    return time.monotonic() - started


async def _held_then_cut(server: RunningServer, peers: list[NeverReads], at_least: int) -> None:
    """The attack state (``at_least`` bytes held, others served), then every peer cut and 0 held."""
    started = time.monotonic()
    await wait_for_metric(server, "ferry_inflight_bytes", at_least, timeout=30)
    assert all(peer.received < ANSWER for peer in peers)  # none of the answers was taken
    assert await asyncio.to_thread(_others_are_served, server) < 2.0
    assert metric(scrape(server), "ferry_inflight_bytes") >= at_least  # still held meanwhile
    await asyncio.wait_for(asyncio.gather(*(peer.closed for peer in peers)), timeout=30)
    assert time.monotonic() - started >= WRITE_TIMEOUT_S  # cut by the deadline, not before
    await wait_for_metric(server, "ferry_inflight_bytes", 0, timeout=30, at_most=True)
    assert f"gRPC connection(s) of ipv4:{ATTACKER}" in server.log()
    assert "a response was not taken within" in server.log()


async def test_unread_unary_answers_are_counted_then_cut(readers) -> None:
    server, _ = readers
    peers = [await _connect(server) for _ in range(3)]
    for peer in peers:
        peer.call(1, "ModelInfer", 1)
    await _held_then_cut(server, peers, at_least=3 * ANSWER)


async def test_unread_stream_answers_are_counted_then_cut(readers) -> None:
    server, _ = readers
    peer = await _connect(server)
    peer.call(1, "ModelStreamInfer", 4)
    # all four answers wait: in the stream's buffer or being written (with intake processes, the
    # one the intake is writing to the client, the others in the model process's stream)
    await _held_then_cut(server, [peer], at_least=4 * ANSWER)
