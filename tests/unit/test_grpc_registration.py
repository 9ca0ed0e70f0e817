"""WrappedRegistration: the inference service reaches grpc as one generic handler, none by name.

Why it matters: grpc.aio's serving loop waits, for every call that arrives, on one posted call per
method registered by name (21 for this service); without them the tiny model's calls took 0.92x the
server's CPU.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from ferry.api.grpc_calls import WrappedRegistration
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc


class RecordingServer:
    """A real grpc.aio server that records how each service was handed to it."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self.server = server
        self.generic: list[Any] = []
        self.by_name: list[str] = []

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.generic.extend(handlers)
        self.server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.by_name.append(service)
        self.server.add_registered_method_handlers(service, handlers)


class Live(pb_grpc.GRPCInferenceServiceServicer):
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:  # noqa: N802
        return pb.ServerLiveResponse(live=True)


async def test_the_service_is_registered_as_one_generic_handler_and_served() -> None:
    server = grpc.aio.server()
    recording = RecordingServer(server)
    wrapped: list[str] = []

    def wrap(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        wrapped.append(method)
        return handler

    registration = WrappedRegistration(recording, wrap)  # type: ignore[arg-type]
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Live(), registration)
    registration.check_registered("inference.GRPCInferenceService")
    assert recording.by_name == []
    assert len(recording.generic) == 1
    assert "/inference.GRPCInferenceService/ModelInfer" in wrapped

    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            for method in ("/inference.GRPCInferenceService/NoSuchMethod", "/other.Service/ServerLive"):
                call: Any = channel.unary_unary(method)  # raw bytes either way
                with pytest.raises(grpc.aio.AioRpcError) as refused:  # no handler of either name
                    await call(b"")
                assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED, method
            answer = await pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest())
        assert answer.live
    finally:
        await server.stop(None)
