"""gRPC messages of the shared memory extensions <-> the protocol-neutral registry."""

from __future__ import annotations

from ferry_client.protocol import grpc_service_pb2 as pb

from .shared_memory import SharedMemoryRegistry


def status_response(registry: SharedMemoryRegistry, name: str) -> pb.SystemSharedMemoryStatusResponse:
    """Every region's status (or one region's) keyed by name, as Triton's message has it."""
    response = pb.SystemSharedMemoryStatusResponse()
    for status in registry.status(name):
        response.regions[status["name"]].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(**status))
    return response


def register(registry: SharedMemoryRegistry, request: pb.SystemSharedMemoryRegisterRequest) -> None:
    registry.register(request.name, request.key, request.offset, request.byte_size)
