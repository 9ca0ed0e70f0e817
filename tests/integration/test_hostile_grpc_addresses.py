"""Message turns per address are bounded for all addresses together too (issue 38, item 7).

Turns per address alone were multiplied by addresses, and any local user has 127.0.0.0/8: 16
loopback addresses x 2 calls of 47 MiB held +1.0-1.5 GB before admission could count them, 16
addresses x 1 stream +1 GB. Now all addresses together, unary calls and streams alike, hold at most
``--grpc-receive-bytes`` over ``--grpc-max-message-bytes`` turns, streams all but one of them.

Clients of many addresses are real gRPC clients (grpcio) reaching the server through a relay per
address that connects from that loopback address (``Relay``), so the server sees 16 peers. The
attack is established first: a raw peer's calls whose messages never come hold every turn, which
a tiny call of yet another address proves by waiting past its deadline. One process (with intake
processes each takes its share of the totals: tests/unit/test_grpc_peer_turns.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import grpc
import numpy as np
import psutil
import pytest

from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import RunningServer, start_quick_server
from ..raw_grpc_peer import DATA, END_STREAM, HEADERS, RawPeer
from .test_hostile_grpc_calls import Attacker

pytestmark = pytest.mark.timeout(180)

TAKEN = "is received in its turn"  # the server's debug line when a message of an address takes a turn
WAITS = "waits for its turn to be received"  # and when one waits for a turn
TOTAL = 2
ADDRESSES = [f"127.0.0.{10 + index}" for index in range(16)]
MIB_EACH = 8
IDLE_S = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    running = start_quick_server(
        tmp_path_factory.mktemp("grpc_addresses"),
        # TOTAL turns of every kind (32 / 16 MiB), streams all but one of them
        *("--grpc-max-message-bytes", str(16 * 2**20), "--grpc-receive-bytes", str(TOTAL * 16 * 2**20)),
        *("--grpc-reads-per-peer", str(TOTAL), "--grpc-stream-reads-per-peer", "1"),
        *("--grpc-idle-stream-secs", str(IDLE_S), "--grpc-request-timeout-secs", "60"),
        *("--max-inflight-bytes", str(2**30)),  # room for every call: turns, not admission, are tested
        *("--log-level", "debug"),  # says when a message takes a turn
    )
    yield running
    running.stop()


class Relay:
    """A local port whose connections reach the server from ``source`` (another loopback address)."""

    def __init__(self, target_port: int, source: str) -> None:
        self.target_port, self.source = target_port, source
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> Relay:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # a connection still open when the test's loop ends
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port, local_addr=(self.source, 0)
            )
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes one way, at the pace the far side takes them (so the server's flow control holds)."""
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def _turns_taken(server: RunningServer, address: str, count: int, since: int) -> None:
    """Until the server has said ``count`` times, after log offset ``since``, that a message of
    ``address`` took a turn."""
    await server.said(f"of {address} {TAKEN}", count, since)


def _request(floats: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="quick")
    request.inputs.add(name="x", datatype="FP32", shape=[1, floats])
    request.raw_input_contents.append(np.zeros(floats, np.float32).tobytes())
    return request


def _call(port: int, request: pb.ModelInferRequest, timeout: float) -> grpc.StatusCode:
    """One ModelInfer on a connection of its own through ``port``; the status it ended with."""
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        try:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=timeout)
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()


async def test_many_addresses_share_the_unary_turns(server: RunningServer) -> None:
    relays = [await Relay(server.grpc_port, source).start() for source in [*ADDRESSES, "127.0.0.30"]]
    probe = relays.pop()
    loop = asyncio.get_running_loop()
    holder = None
    try:
        # every turn of all addresses held by calls whose messages never come (one raw peer, 127.0.0.1)
        since = len(server.log())
        _, holder = await loop.create_connection(Attacker, "127.0.0.1", server.grpc_port)
        for index in range(TOTAL):
            holder.open(1 + 2 * index, "ModelInfer")
        await _turns_taken(server, "127.0.0.1", TOTAL, since)
        # the attack state: an address with turns of its own to spare waits past its deadline
        assert await asyncio.to_thread(_call, probe.port, _request(16), 2.0) == grpc.StatusCode.DEADLINE_EXCEEDED
        process = psutil.Process(server.process.pid)
        before = process.memory_info().rss
        statuses: list[grpc.StatusCode] = []
        big = _request(MIB_EACH * 2**20 // 4)
        threads = [
            threading.Thread(target=lambda port=relay.port: statuses.append(_call(port, big, 60.0)), daemon=True)
            for relay in relays
        ]
        since = len(server.log())
        for thread in threads:
            thread.start()
        # every address's call waits (the server says so for each), unread
        await server.said(WAITS, len(relays), since)
        growth = process.memory_info().rss - before
        assert statuses == []
        assert growth < 4 * MIB_EACH * 2**20, f"+{growth / 2**20:.0f} MiB while 16 addresses waited"
        assert holder.transport is not None
        holder.transport.close()  # the turns pass on, and each address's call is received in its turn
        for thread in threads:
            await asyncio.to_thread(thread.join, 60)
        # each was received and answered: its shape does not fit the model, which says so
        assert statuses == [grpc.StatusCode.INVALID_ARGUMENT] * len(relays), statuses
        assert await asyncio.to_thread(_call, probe.port, _request(16), 10.0) == grpc.StatusCode.OK
    finally:
        if holder is not None and holder.transport is not None:
            holder.transport.close()  # a failure here must not leave the next test without turns
        for relay in [*relays, probe]:
            relay.close()


class LoggingPeer(RawPeer):
    """A RawPeer that logs, in order, the answers' data and the trailers of its streams."""

    def __init__(self, message: bytes, log: list[tuple[str, str]], name: str) -> None:
        super().__init__(message, reads_others=True)
        self.log, self.name = log, name

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == DATA and payload:
            self.log.append(("data", self.name))
        elif kind == HEADERS and flags & END_STREAM:
            self.log.append(("end", self.name))
        super()._frame(kind, flags, stream, payload)


async def test_a_stream_idle_on_the_last_turn_gives_way_to_another_address(server: RunningServer) -> None:
    """One stream turn for all addresses: a stream of 127.0.0.40, answered and idle on it, is ended
    once a stream of 127.0.0.41 (which has a turn of its own to spare) has waited, naming the option."""
    loop = asyncio.get_running_loop()
    log: list[tuple[str, str]] = []
    message = _request(16).SerializeToString()
    peers = []
    for name, source in (("idle", "127.0.0.40"), ("waiting", "127.0.0.41")):
        _, peer = await loop.create_connection(
            lambda name=name: LoggingPeer(message, log, name), "127.0.0.1", server.grpc_port, local_addr=(source, 0)
        )
        assert isinstance(peer, LoggingPeer)
        peers.append(peer)
    idle, waiting = peers
    try:
        since = len(server.log())
        idle.call(1, "ModelStreamInfer", 1, end=False)  # answered, then it holds the only turn, idle
        await idle.until(lambda: len(idle.messages(1)) == 1)
        await _turns_taken(server, "127.0.0.40", 2, since)  # its first message's turn, then the next one's
        waiting.call(1, "ModelStreamInfer", 1, end=False)
        await waiting.until(lambda: len(waiting.messages(1)) == 1, timeout=IDLE_S + 60)
        await idle.until(lambda: 1 in idle.trailers)
    finally:
        for peer in peers:
            assert peer.transport is not None
            peer.transport.close()
    assert idle.trailers[1]["grpc-status"] == str(grpc.StatusCode.UNAVAILABLE.value[0])
    details = idle.trailers[1].get("grpc-message", "")
    assert "--grpc-receive-bytes" in details and "--grpc-idle-stream-secs" in details, details
    assert log.index(("end", "idle")) < log.index(("data", "waiting"))  # answered only once the idle one ended


async def test_streams_and_unary_calls_share_one_receive_budget(server: RunningServer) -> None:
    """The receive budget (TOTAL turns) bounds every posted read, unary and streamed together: a
    stream answered and idle on the one stream turn leaves the last turn to unary calls, so a tiny
    call is served at once; once a unary message that never comes holds that last turn, every
    address's call waits (before, the unary and the stream pools added up), and it is served as
    soon as the turn comes free."""
    loop = asyncio.get_running_loop()
    relays = [await Relay(server.grpc_port, source).start() for source in ("127.0.0.51", "127.0.0.52")]
    _, idle = await loop.create_connection(
        lambda: RawPeer(_request(16).SerializeToString(), reads_others=True),
        "127.0.0.1",
        server.grpc_port,
        local_addr=("127.0.0.50", 0),
    )
    assert isinstance(idle, RawPeer)
    holder = None
    try:
        since = len(server.log())
        idle.call(1, "ModelStreamInfer", 1, end=False)  # answered, then idle on the one stream turn
        await idle.until(lambda: len(idle.messages(1)) == 1)
        await _turns_taken(server, "127.0.0.50", 2, since)
        assert await asyncio.to_thread(_call, relays[0].port, _request(16), 10.0) == grpc.StatusCode.OK
        since = len(server.log())
        _, holder = await loop.create_connection(Attacker, "127.0.0.1", server.grpc_port)
        holder.open(1, "ModelInfer")  # its message never comes: it holds the last turn
        await _turns_taken(server, "127.0.0.1", 1, since)
        assert await asyncio.to_thread(_call, relays[1].port, _request(16), 2.0) == grpc.StatusCode.DEADLINE_EXCEEDED
        assert 1 not in idle.trailers  # no stream waited: the idle one keeps its turn
        assert holder.transport is not None
        holder.transport.close()
        assert await asyncio.to_thread(_call, relays[1].port, _request(16), 10.0) == grpc.StatusCode.OK
    finally:
        for peer in (idle, holder):
            if peer is not None and peer.transport is not None:
                peer.transport.close()
        for relay in relays:
            relay.close()
