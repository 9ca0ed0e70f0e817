"""One gRPC client must not hold every call slot (issue 24).

The attacker speaks raw HTTP/2 from loopback addresses of its own (127.0.0.2; 127.0.0.3), so the server sees it as
another peer than the well-behaved client (127.0.0.1): it opens streams, sends their headers and
never a request message or the end of the stream. The test establishes the attack (the server's
answers to the attacker's streams are read: refused ones carry RESOURCE_EXHAUSTED naming the peer
cap), shows that the other peer is served while it holds, and that unary calls whose message never
arrives end with DEADLINE_EXCEEDED after ``--grpc-request-timeout-secs`` and give their slots back:
not before a call opened after them whose client gave it a shorter deadline of its own has ended.
No assertion times a call: the other peer is served or refused, never merely slow. Both modes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import grpc
import hpack
import numpy as np
import pytest

from ferry_client.perf.rawgrpc import frame
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import RunningServer, start_quick_server, start_server
from ..models import write_mlp_model
from ..raw_grpc_peer import ACK, END_HEADERS, HEADERS, PING, RST_STREAM, SETTINGS, call_headers

pytestmark = pytest.mark.timeout(120)

PER_PEER = 8
MAX_RPCS = 48
REQUEST_TIMEOUT_S = 3
CONNECTIONS, STREAMS = 4, 24  # 96 streams from one peer: twice the server-wide cap
ATTACKER = "127.0.0.2"
#: Each test attacks from an address of its own: a call the previous test left open is ended by the
#: server when it sees the connection close, which may be after the next test has begun, and the
#: per-peer cap counts by address.
LATE_SENDER = "127.0.0.3"
#: Opens a call with a deadline of its own, shorter than the server's request timeout.
REFERENCE = "127.0.0.4"


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def grpc_server(request, tmp_path_factory) -> Iterator[tuple[RunningServer, int]]:
    repo = tmp_path_factory.mktemp("hostile_grpc") / "models"
    write_mlp_model(repo / "quick", width=16, layers=1)
    processes = 2 if request.param == "2 intake processes" else 1
    extra = ["--intake-processes", "2"] if processes == 2 else []
    running = start_server(
        repo,
        repo.parent / "server.log",
        "--grpc-max-calls-per-peer",
        str(PER_PEER),
        "--grpc-max-concurrent-rpcs",
        str(MAX_RPCS),
        "--grpc-request-timeout-secs",
        str(REQUEST_TIMEOUT_S),
        *extra,
    )
    yield running, processes
    running.stop()


class Attacker(asyncio.Protocol):
    """One HTTP/2 connection that opens streams and never finishes them; records each stream's end."""

    def __init__(self, endings: list[Attacker] | None = None) -> None:
        self.endings = endings if endings is not None else []  # each stream's end, in the order they came
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.buffer = b""
        self.ended: dict[int, str] = {}  # stream -> grpc-status (or "RST")
        self.messages: dict[int, str] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                return
            kind, flags = self.buffer[3], self.buffer[4]
            stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload, self.buffer = self.buffer[9 : 9 + length], self.buffer[9 + length :]
            assert self.transport is not None
            if kind == SETTINGS and not flags & ACK:
                self.transport.write(frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                self.transport.write(frame(PING, ACK, 0, payload))
            elif kind == HEADERS:
                headers = dict(self.decoder.decode(payload))
                if "grpc-status" in headers:
                    self._end(stream, headers["grpc-status"])
                    self.messages[stream] = headers.get("grpc-message", "")
            elif kind == RST_STREAM:  # after trailers it only closes our half (we never finish)
                self._end(stream, "RST")

    def _end(self, stream: int, status: str) -> None:
        if stream not in self.ended:
            self.ended[stream] = status
            self.endings.append(self)

    def open(self, stream: int, method: str, timeout: str | None = None) -> None:
        assert self.transport is not None
        self.transport.write(frame(HEADERS, END_HEADERS, stream, call_headers(self.encoder, method, timeout)))


async def _attack(
    port: int,
    method: str,
    connections: int,
    streams: int,
    source: str = ATTACKER,
    endings: list[Attacker] | None = None,
    timeout: str | None = None,
) -> list[Attacker]:
    """``connections`` from ``source``, each opening ``streams`` calls of ``method`` (with the client's
    deadline ``timeout``); ``endings``: where every stream's end is recorded, in order."""
    loop = asyncio.get_running_loop()
    attackers = []
    for _ in range(connections):
        _, attacker = await loop.create_connection(lambda: Attacker(endings), "127.0.0.1", port, local_addr=(source, 0))
        for index in range(streams):
            attacker.open(1 + 2 * index, method, timeout)
        attackers.append(attacker)
    return attackers


def _close(attackers: list[Attacker]) -> None:
    for attacker in attackers:
        assert attacker.transport is not None
        attacker.transport.close()


def _statuses(attackers: list[Attacker]) -> list[str]:
    return [status for attacker in attackers for status in attacker.ended.values()]


async def _wait(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def _infer(server: RunningServer) -> None:
    """One ModelInfer from the other peer (127.0.0.1) on a fresh connection; raises unless served."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(server.grpc_url, options=options) as channel:
        request = pb.ModelInferRequest(model_name="quick")
        request.inputs.add(name="x", datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
        await pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)


async def test_one_peer_cannot_hold_every_call_slot(grpc_server) -> None:
    server, processes = grpc_server
    attackers = await _attack(server.grpc_port, "ModelStreamInfer", CONNECTIONS, STREAMS)
    total = CONNECTIONS * STREAMS
    held_at_most = PER_PEER * processes  # the cap is per process
    # the attack state: every stream past the peer's cap refused, naming the cap
    await _wait(lambda: len(_statuses(attackers)) >= total - held_at_most)
    messages = {m for a in attackers for m in a.messages.values()}
    assert any(f"too many unfinished calls from {ATTACKER}" in m for m in messages), messages
    for _ in range(3):  # the other peer is served (not refused) while the attacker holds its share
        await _infer(server)
    statuses = _statuses(attackers)  # read after the other peer's calls: the held ones stayed open
    assert total - held_at_most <= len(statuses) < total
    assert set(statuses) == {str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])}, statuses
    _close(attackers)


async def test_a_request_message_that_never_arrives_times_out(grpc_server) -> None:
    server, processes = grpc_server
    endings: list[Attacker] = []
    attackers = await _attack(server.grpc_port, "ModelInfer", 2, PER_PEER // 2, LATE_SENDER, endings)
    # opened after them, from another address, with its client's own deadline of 1 s (grpc ends it)
    (reference,) = await _attack(server.grpc_port, "ModelInfer", 1, 1, REFERENCE, endings, timeout="1S")
    await _wait(lambda: len(endings) == PER_PEER + 1, timeout=REQUEST_TIMEOUT_S + 20)
    # not ended before their deadline: the call opened after them with a shorter one ended first
    assert endings[0] is reference, [a is reference for a in endings]
    assert set(_statuses(attackers)) == {str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])}
    messages = {m for a in attackers for m in a.messages.values()}
    assert any("did not arrive within 3 s" in m for m in messages), messages
    # the expired calls gave their slots back while their connections stay open: the attacker's
    # address may open a full share again, and those calls end by the same timeout, not refused
    again = await _attack(server.grpc_port, "ModelInfer", 1, PER_PEER, LATE_SENDER)
    await _wait(lambda: len(_statuses(again)) == PER_PEER, timeout=REQUEST_TIMEOUT_S + 20)
    assert set(_statuses(again)) == {str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])}
    await _infer(server)
    _close([*attackers, reference, *again])


SHARED_CAP = 16  # --grpc-max-concurrent-rpcs: 8 per intake process
HOLDER = "127.0.0.4"


@pytest.fixture(scope="module")
def two_intakes(tmp_path_factory) -> Iterator[RunningServer]:
    """Two intakes whose per-peer cap, as configured, equals the server-wide one (issue 38 item 8)."""
    running = start_quick_server(
        tmp_path_factory.mktemp("hostile_grpc_slots"),
        *("--grpc-max-concurrent-rpcs", str(SHARED_CAP), "--grpc-max-calls-per-peer", str(SHARED_CAP)),
        *("--grpc-request-timeout-secs", "120", "--intake-processes", "2"),
    )
    yield running
    running.stop()


async def test_never_finished_calls_of_one_address_leave_each_intake_room(two_intakes: RunningServer) -> None:
    """With two intakes each held half the server-wide cap (8), and one address could hold all of
    it: 20 connections of never-finished calls had grpc refuse everyone else ("Concurrent RPC limit
    exceeded!"). Now one address holds at most half a process's share (4): the attacker's calls past
    it are refused by the per-peer cap, never by grpc's, and another address is served."""
    connections, streams = 8, 12  # 96 never-finished calls over connections spread on both intakes
    attackers = await _attack(two_intakes.grpc_port, "ModelInfer", connections, streams, HOLDER)
    total = connections * streams
    # the attack state: everything past what the two intakes hold is refused (at most 2 x 8)
    await _wait(lambda: len(_statuses(attackers)) >= total - SHARED_CAP)
    messages = [m for a in attackers for m in a.messages.values()]
    assert set(_statuses(attackers)) == {str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])}
    assert not [m for m in messages if "Concurrent RPC limit exceeded" in m], messages
    assert all(f"too many unfinished calls from {HOLDER} (limit 4," in m for m in messages), messages
    for _ in range(8):  # fresh connections of another address, on both intakes: each is served
        await _infer(two_intakes)
    _close(attackers)


FIRST_MESSAGE_S = 2
SILENT = "127.0.0.5"
FREED = f"a gRPC call of {SILENT} is over"  # the server's debug line when a call's slot comes back


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def first_message_server(request, tmp_path_factory) -> Iterator[RunningServer]:
    extra = ["--intake-processes", "2"] if request.param == "2 intake processes" else []
    running = start_quick_server(
        tmp_path_factory.mktemp("hostile_grpc_first_message"),
        *("--grpc-stream-first-message-secs", str(FIRST_MESSAGE_S), "--grpc-max-calls-per-peer", str(PER_PEER)),
        *("--grpc-stream-reads-per-peer", "2"),  # fewer than the attacker's streams: some wait for a turn
        *("--log-level", "debug"),  # says when a call's slot comes back
        *extra,
    )
    yield running
    running.stop()


async def test_a_stream_whose_first_message_never_comes_is_ended(first_message_server: RunningServer) -> None:
    """Streams opened that never send a request held their call slots for as long as their
    connection lived (issue 38, item 8). Now each is ended with DEADLINE_EXCEEDED once
    ``--grpc-stream-first-message-secs`` has passed (those waiting for one of their address's
    stream turns too), which gives the slots back; a stream that sent its first message in time
    is not ended, however long it then stays idle."""
    server = first_message_server
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(server.grpc_url, options=options) as channel:
        sent: asyncio.Queue[pb.ModelInferRequest | None] = asyncio.Queue()

        async def requests() -> AsyncIterator[pb.ModelInferRequest]:
            while (message := await sent.get()) is not None:
                yield message

        request = pb.ModelInferRequest(model_name="quick")
        request.inputs.add(name="x", datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
        kept = pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
        sent.put_nowait(request)
        assert not (await kept.read()).error_message  # its first message came in time: answered
        # the attack: the address's full share of calls (8), streams that never send a message
        since = len(server.log())
        attackers = await _attack(server.grpc_port, "ModelStreamInfer", 2, PER_PEER // 2, SILENT)
        await _wait(lambda: len(_statuses(attackers)) == PER_PEER, timeout=FIRST_MESSAGE_S + 30)
        ended = {str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])}
        messages = {m for a in attackers for m in a.messages.values()}
        assert set(_statuses(attackers)) == ended, messages
        assert messages == {
            f"the stream's first request message did not arrive within {FIRST_MESSAGE_S} s "
            "(--grpc-stream-first-message-secs)"
        }
        # the slots came back (the server says so: each stream's end reached its client first, from grpc
        # core): the address opens its full share again, ended the same way, not refused
        await server.said(FREED, PER_PEER, since)
        again = await _attack(server.grpc_port, "ModelStreamInfer", 1, PER_PEER, SILENT)
        await _wait(lambda: len(_statuses(again)) == PER_PEER, timeout=FIRST_MESSAGE_S + 30)
        assert set(_statuses(again)) == ended, {m for a in again for m in a.messages.values()}
        # the stream that sent in time is still open and served, idle all that while
        sent.put_nowait(request)
        assert not (await kept.read()).error_message
        sent.put_nowait(None)
        assert await kept.code() == grpc.StatusCode.OK
        _close(attackers + again)


#: Every method of the service: the server accepts the next call of each method in one turn of its
#: loop, so calls of many methods at once arrive faster than their refusals are sent.
METHODS = (
    "ModelInfer",
    "ModelStreamInfer",
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelConfig",
    "ModelStatistics",
    "RepositoryIndex",
)
BURSTER = "127.0.0.6"


async def test_a_burst_of_refused_calls_never_fills_grpcs_own_count(two_intakes: RunningServer) -> None:
    """grpc counts a call from its arrival until its status is sent, refusals included. With grpc's
    limit equal to the cap, an address at its per-peer cap whose refused calls (of every method, in
    one burst) were still being answered filled grpc's count: 84-88 of these 112 refusals were
    grpc's own "Concurrent RPC limit exceeded!", which refuses every other client too. The guard
    now counts the cap itself and grpc's limit sits 128 above it: 120 calls cannot reach it on one
    intake, whatever the timing, so every refusal names the per-peer cap."""
    loop = asyncio.get_running_loop()
    attackers = []
    for _ in range(4):
        _, attacker = await loop.create_connection(
            Attacker, "127.0.0.1", two_intakes.grpc_port, local_addr=(BURSTER, 0)
        )
        attackers.append(attacker)
    for attacker in attackers:  # the burst: every connection's calls written at once
        for index in range(30):
            attacker.open(1 + 2 * index, METHODS[index % len(METHODS)])
    total = 4 * 30
    await _wait(lambda: len(_statuses(attackers)) >= total - SHARED_CAP // 2)  # each intake holds 4 at most
    messages = [m for a in attackers for m in a.messages.values()]
    assert set(_statuses(attackers)) == {str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])}
    assert all(f"too many unfinished calls from {BURSTER} (limit 4," in m for m in messages), messages
    await _infer(two_intakes)
    _close(attackers)


PROCESS_CAP = 8  # --grpc-max-concurrent-rpcs in one process: each address holds 4 at most
HOLDERS = ("127.0.0.7", "127.0.0.8")
HOLDER_FREED = "a gRPC call of 127.0.0.7 is over"


@pytest.fixture(scope="module")
def one_process_cap(tmp_path_factory) -> Iterator[RunningServer]:
    running = start_quick_server(
        tmp_path_factory.mktemp("hostile_grpc_process_cap"),
        *("--grpc-max-concurrent-rpcs", str(PROCESS_CAP), "--grpc-request-timeout-secs", "120"),
        *("--intake-processes", "1"),  # one process, whatever the machine's cores
        *("--log-level", "debug"),  # says when a call's slot comes back
    )
    yield running
    running.stop()


async def test_the_calls_of_many_addresses_together_meet_the_process_cap(one_process_cap: RunningServer) -> None:
    """Two addresses each hold their share (4) of never-finished calls: together the cap (8). A third
    address is refused by the guard, naming --grpc-max-concurrent-rpcs (grpc's own limit, 128 above,
    is not what refuses it); once one holder's calls are gone, it is served."""
    server = one_process_cap
    share = PROCESS_CAP // 2
    # each holder opens one call past its share: that one's refusal, by the per-peer cap, says the
    # server holds the other four (calls of one method are taken in the order they came)
    holders = [await _attack(server.grpc_port, "ModelInfer", 1, share + 1, address) for address in HOLDERS]
    for (holder,), address in zip(holders, HOLDERS, strict=True):
        await _wait(lambda holder=holder: len(holder.ended) == 1)
        assert list(holder.messages.values()) == [
            f"too many unfinished calls from {address} (limit {share}, --grpc-max-calls-per-peer)"
        ]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _infer(server)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == (
        f"too many unfinished calls (limit {PROCESS_CAP} per process, --grpc-max-concurrent-rpcs)"
    )
    assert [len(holder.ended) for (holder,) in holders] == [1, 1]  # the held calls are still open
    since = len(server.log())
    _close(holders[0])
    await server.said(HOLDER_FREED, share, since)
    await _infer(server)
    _close(holders[1])
