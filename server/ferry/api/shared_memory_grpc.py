"""gRPC messages of the shared memory extensions <-> the protocol-neutral registry. Each call acts
for the caller's identity, read from its ``authorization`` metadata."""

from __future__ import annotations

import grpc

from ferry_client.protocol import grpc_service_pb2 as pb

from ..security.identity import Identify
from .shared_memory import SharedMemoryRegistry


def caller(identify: Identify, context: grpc.aio.ServicerContext) -> str:
    """The identity of the call's ``authorization`` metadata (what the auth interceptor let through)."""
    metadata = context.invocation_metadata() or ()
    return identify(next((value for key, value in metadata if key == "authorization"), None))


def status_response(registry: SharedMemoryRegistry, owner: str, name: str) -> pb.SystemSharedMemoryStatusResponse:
    """Every region's status (or one region's) keyed by name, as Triton's message has it."""
    response = pb.SystemSharedMemoryStatusResponse()
    for status in registry.status(owner, name):
        response.regions[status["name"]].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(**status))
    return response


def register(registry: SharedMemoryRegistry, owner: str, request: pb.SystemSharedMemoryRegisterRequest) -> None:
    registry.register(owner, request.name, request.key, request.offset, request.byte_size)
