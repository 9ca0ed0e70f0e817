"""One client's many large gRPC messages at once are received in turns (issue 24).

grpc reads a request message whole, and parses it, before admission can see its size: a client
sending sixteen 64 MiB unary calls at once took the server from 145 MiB to 1.2 GB. Now a peer's
messages are asked for one at a time (``--grpc-reads-per-peer``), and a call waiting for its turn
holds only grpc's initial window.

The test causes the waiting: a raw HTTP/2 connection from the same address (127.0.0.1) opens
ModelInfer calls and never sends their messages, so they hold the peer's turns (the server says
so in its debug log; a tiny call from that address timing out proves it). Large calls sent
meanwhile stay unread, and the server's memory with them, once the server has said (its debug log)
that each waits for its turn; once the holder hangs up, every one of them is received and
answered. One process: turns are per process, and with intake processes the holder and the
callers may reach different intakes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import grpc
import numpy as np
import psutil
import pytest

from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import RunningServer, start_quick_server, start_server
from ..models import write_mlp_model
from .test_hostile_grpc_calls import Attacker

pytestmark = pytest.mark.timeout(180)

CALLS, MIB_EACH = 8, 32
TURNS = 2
WAITS = "waits for its turn to be received"  # the server's debug line for a message left unread
TAKEN = "of 127.0.0.1 is received in its turn"  # and for one of the holder's that takes a turn


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    running = start_quick_server(
        tmp_path_factory.mktemp("grpc_turns"),
        *("--grpc-request-timeout-secs", "60", "--grpc-reads-per-peer", str(TURNS)),
        # messages of MIB_EACH, and a receive budget of TURNS of them
        *("--grpc-max-message-bytes", str(48 * 2**20), "--grpc-receive-bytes", str(TURNS * 48 * 2**20)),
        *("--max-inflight-bytes", str(2**30)),  # room for every call: turns, not admission, are tested
        *("--log-level", "debug"),  # says when a message waits for its turn
    )
    yield running
    running.stop()


def _request(floats: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="quick")
    request.inputs.add(name="x", datatype="FP32", shape=[1, floats])
    request.raw_input_contents.append(np.zeros(floats, np.float32).tobytes())
    return request


def _call(server: RunningServer, request: pb.ModelInferRequest, timeout: float) -> grpc.StatusCode:
    """One unary ModelInfer on a connection of its own; the status it ended with."""
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(server.grpc_url, options=options) as channel:
        try:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=timeout)
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()


async def _hold_the_turn(server: RunningServer) -> Attacker:
    """Calls from 127.0.0.1 whose messages never come, once the server says they hold all of that
    address's turns."""
    loop = asyncio.get_running_loop()
    since = len(server.log())
    _, holder = await loop.create_connection(Attacker, "127.0.0.1", server.grpc_port)
    for index in range(TURNS):
        holder.open(1 + 2 * index, "ModelInfer")
    await server.said(TAKEN, TURNS, since)
    return holder


async def test_large_messages_of_one_client_are_received_in_turns(server: RunningServer) -> None:
    process = psutil.Process(server.process.pid)
    holder = await _hold_the_turn(server)
    try:
        # the attack state: a tiny call from the same address waits for the turn, past its deadline
        assert await asyncio.to_thread(_call, server, _request(16), 1.0) == grpc.StatusCode.DEADLINE_EXCEEDED
        before = process.memory_info().rss
        log_before = len(server.log())
        statuses: list[grpc.StatusCode] = []
        big = _request(MIB_EACH * 2**20 // 4)
        threads = [
            threading.Thread(target=lambda: statuses.append(_call(server, big, 60.0)), daemon=True)
            for _ in range(CALLS)
        ]
        for thread in threads:
            thread.start()
        await server.said(WAITS, CALLS, log_before)
        waiting_growth = process.memory_info().rss - before
        assert statuses == []  # all of them wait for the turn
        # unread, the messages stay with the client: without turns this was the whole 256 MiB and more
        assert waiting_growth < MIB_EACH * 2**20, f"+{waiting_growth / 2**20:.0f} MiB while the calls waited"

        assert holder.transport is not None
        holder.transport.close()  # the holder hangs up: its turn passes on, and so on down the queue
        for thread in threads:
            await asyncio.to_thread(thread.join, 60)  # a hang guard only
        assert len(statuses) == CALLS, f"{len(statuses)} of {CALLS} answered"
        # each was received and answered: its shape does not fit the model, which says so
        assert set(statuses) == {grpc.StatusCode.INVALID_ARGUMENT}, statuses
        assert await asyncio.to_thread(_call, server, _request(16), 10.0) == grpc.StatusCode.OK
    finally:
        if holder.transport is not None:
            holder.transport.close()  # a failure must not leave the turns held


def _raw_call(server: RunningServer, message: bytes) -> tuple[grpc.StatusCode, str]:
    """A ModelInfer call whose message is ``message`` as it is, valid or not: its status and details."""
    with grpc.insecure_channel(server.grpc_url, options=[("grpc.max_send_message_length", -1)]) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            call(message, timeout=30)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
        return grpc.StatusCode.OK, ""


def test_a_message_is_counted_from_its_bytes_before_it_is_parsed(tmp_path) -> None:
    """Admission counts a ModelInfer message (twice: its bytes and the parsed copy) before parsing
    it, so the parsed copy never exists uncounted and a message that cannot fit is never parsed.
    Bytes that are no valid message prove the order: one too large for the 1 MiB cap is refused
    with RESOURCE_EXHAUSTED naming the cap (parsing first would have said INVALID_ARGUMENT), a
    small one still gets INVALID_ARGUMENT, and a valid call is answered."""
    repo = tmp_path / "models"
    write_mlp_model(repo / "quick", width=16, layers=1)
    running = start_server(repo, tmp_path / "server.log", "--max-inflight-bytes", str(2**20))
    try:
        code, details = _raw_call(running, b"\xff" * (600 * 1024))  # counted twice: 1.2 MiB
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert "--max-inflight-bytes" in details
        code, details = _raw_call(running, b"\xff" * 1024)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
        assert "not a valid ModelInferRequest message" in details
        assert _call(running, _request(16), 10.0) == grpc.StatusCode.OK
    finally:
        running.stop()
