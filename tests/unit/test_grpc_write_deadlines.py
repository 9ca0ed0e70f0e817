"""The gRPC write deadline (``grpc_calls.WriteDeadlines``) on a real grpc.aio server in this process.

A call whose client does not take its answer in time is ended alone (``grpc_cancel.end_call``): the
client sees DEADLINE_EXCEEDED and RST_STREAM on that stream, what the handler held until the answer
was written is released, and another call on the same connection is answered. The fallback, closing
the client's connection, is taken when grpc gives no way to end the call alone or the ended call is
still not over after the grace; ``end_call`` is replaced to stand for such a grpcio, since this one
does end calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import pytest

from ferry.api import grpc_cancel
from ferry.api.grpc_calls import CallGuard, ExpectedFailures, release_after_write
from ferry_client.protocol import grpc_service_pb2 as pb

from ..raw_grpc_peer import RawPeer

pytestmark = pytest.mark.timeout(60)

ANSWER = 1024 * 1024  # bytes: far past the 64 KiB the stalled stream may take
WRITE_TIMEOUT_S = 1.0  # + 1 s for the 1 MiB answer: 2 s, far from what the checks before it take
DEADLINE_EXCEEDED = str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])


class Served:
    """A guarded ``ModelInfer`` answering ``ANSWER`` bytes, counting what it held until written."""

    def __init__(self) -> None:
        self.held = 0
        self.guard = CallGuard(max_calls_per_peer=16, max_calls=32, request_timeout=10, write_timeout=WRITE_TIMEOUT_S)

    async def infer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        self.held += 1
        release_after_write(self._release)
        return pb.ModelInferResponse(model_name=request.model_name, raw_output_contents=[b"y" * ANSWER])

    def _release(self) -> None:
        self.held -= 1


@pytest.fixture
async def served() -> AsyncIterator[tuple[Served, int]]:
    served = Served()
    handler = grpc.unary_unary_rpc_method_handler(
        served.infer,
        request_deserializer=pb.ModelInferRequest.FromString,
        response_serializer=pb.ModelInferResponse.SerializeToString,
    )
    server = grpc.aio.server()
    service = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": served.guard.wrap(handler)}
    )
    server.add_generic_rpc_handlers((service,))
    port = server.add_insecure_port("127.0.0.1:0")
    served.guard.ports = (port,)
    await server.start()
    yield served, port
    await server.stop(None)


async def _connect(port: int) -> RawPeer:
    message = pb.ModelInferRequest(model_name="m").SerializeToString()
    _, peer = await asyncio.get_running_loop().create_connection(
        lambda: RawPeer(message, stalled=(1,), reads_others=True), "127.0.0.1", port
    )
    return peer


async def test_a_late_call_is_ended_alone_and_releases_its_answer(served, caplog) -> None:
    served, port = served
    peer = await _connect(port)
    peer.call(1, "ModelInfer", 1)
    await peer.until(lambda: peer.received.get(1, 0) > 0)
    assert served.held == 1  # written in part: still held

    await peer.until(lambda: 1 in peer.trailers and 1 in peer.resets)
    assert peer.trailers[1]["grpc-status"] == DEADLINE_EXCEEDED
    assert "--grpc-write-timeout-secs" in peer.trailers[1]["grpc-message"]
    assert peer.received[1] < ANSWER
    await asyncio.wait_for(_released(served), timeout=5)  # grpc's done callback ran
    assert not served.guard.calls  # and the call's slot (--grpc-max-calls-per-peer) is free

    peer.call(3, "ModelInfer", 1)  # the same connection serves the next call
    await peer.until(lambda: 3 in peer.trailers)
    assert peer.trailers[3]["grpc-status"] == "0"
    assert len(pb.ModelInferResponse.FromString(peer.messages(3)[0]).raw_output_contents[0]) == ANSWER
    assert not peer.closed.done()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # grpc's ERROR for the ended call dropped
    assert any(r.getMessage().startswith("ended a gRPC call of ipv4:127.0.0.1") for r in caplog.records)
    assert not ExpectedFailures.calls  # (what the filter knew of the call is forgotten)
    peer.transport.close()


async def test_a_call_grpc_cannot_end_alone_closes_the_connection(served, monkeypatch, caplog) -> None:
    served, port = served
    monkeypatch.setattr(grpc_cancel, "end_call", lambda *_: False)  # a grpcio that lends no call
    peer = await _connect(port)
    peer.call(1, "ModelInfer", 1)
    await asyncio.wait_for(peer.closed, timeout=10)
    assert 1 not in peer.trailers
    await asyncio.wait_for(_released(served), timeout=5)  # the call died with its connection
    await asyncio.wait_for(_logged(caplog, "grpc offered no way to end the call alone"), timeout=5)


async def test_an_ended_call_still_running_after_the_grace_closes_the_connection(served, monkeypatch, caplog) -> None:
    served, port = served
    ended: list[float] = []

    def accept_but_do_nothing(*_: object) -> bool:  # a grpcio whose cancel does not end the call
        ended.append(asyncio.get_running_loop().time())
        return True

    monkeypatch.setattr(grpc_cancel, "end_call", accept_but_do_nothing)
    served.guard.writes.end_grace = 0.5
    peer = await _connect(port)
    peer.call(1, "ModelInfer", 1)
    await asyncio.wait_for(peer.closed, timeout=10)
    assert len(ended) == 1 and asyncio.get_running_loop().time() - ended[0] >= 0.5
    await asyncio.wait_for(_released(served), timeout=5)
    await asyncio.wait_for(_logged(caplog, "its call was still not over 0.5 s after it was ended"), timeout=5)


async def _released(served: Served) -> None:
    while served.held:
        await asyncio.sleep(0.01)


async def _logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    """The connection is closed on another thread; its report is logged once the loop hears of it."""
    while text not in caplog.text:
        await asyncio.sleep(0.01)
