"""Builds the REST and gRPC listeners from the settings, for the one-process server and for each
intake process alike, so both apply the same limits, security and options."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
from collections.abc import Iterator
from typing import Any

import grpc
import uvicorn
from starlette.types import ASGIApp

from .api.connection_limits import ConnectionGuard, HttpConnectionLimits, OpenConnections
from .api.drain_cutoff import DrainCutoff
from .api.grpc import create_grpc_server
from .api.grpc_limits import GrpcLimits
from .api.limits import Limits
from .api.shared_memory import SharedMemoryRegistry
from .api.stream_limits import StreamLimits
from .security import ServerSecurity
from .settings import Settings


class QuietUvicornServer(uvicorn.Server):
    """uvicorn without its own signal handling: the Ferry server owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def wait_started(server: uvicorn.Server, task: asyncio.Task, what: str) -> None:
    """Until uvicorn accepts connections; OSError naming ``what`` if it stopped instead (a bind failure)."""
    while not server.started:
        if task.done():
            raise OSError(f"{what} stopped at start-up")
        await asyncio.sleep(0.01)


def request_limits(s: Settings) -> Limits:
    return Limits(
        s.max_tensor_elements,
        s.max_bytes_elements,
        s.max_inputs_per_request,
        s.http_max_json_bytes,
        s.max_variable_input_elements,
    )


def shared_memory_registry(s: Settings) -> SharedMemoryRegistry:
    """The client shared memory regions, as the settings allow them (the model process's, and each
    intake's mirror of those it uses)."""
    return SharedMemoryRegistry(
        enabled=s.allow_shared_memory,
        owner_uids=frozenset(s.shared_memory_owner_uids),
        max_regions=s.shared_memory_max_regions,
        max_regions_per_owner=s.shared_memory_max_regions_per_client,
    )


def stream_limits(s: Settings) -> StreamLimits:
    """The per-stream and per-client bounds on streamed requests, of each process serving the ports."""
    return StreamLimits(s.grpc_max_stream_requests, s.max_streamed_requests_per_peer)


def _share(cap: int, processes: int) -> int:
    """One process's part of a server-wide cap (0 stays 'no cap')."""
    return cap if cap == 0 else max(1, math.ceil(cap / processes))


def connection_options(s: Settings, shared: OpenConnections | None = None) -> dict[str, Any]:
    """uvicorn options of a REST-style listener: its own guarded protocol and the keep-alive timeout.

    ``shared``: the intake processes' connection count, so the cap holds for the whole port."""
    limits = HttpConnectionLimits(
        s.http_max_connections,
        s.http_header_timeout_secs,
        s.http_max_header_bytes,
        s.http_min_body_rate,
        s.http_body_grace_secs,
        shared,
    )
    return {"http": ConnectionGuard(limits).protocol(), "timeout_keep_alive": s.http_keep_alive_timeout_secs}


def rest_config(app: ASGIApp, s: Settings, security: ServerSecurity, **listener: Any) -> uvicorn.Config:
    """The public REST listener (``listener``: host/port, or nothing when serving given sockets)."""
    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=max(1, int(s.exit_timeout_secs)),
        **listener,
        **security.uvicorn_options(),
    )


def receive_turns(s: Settings, processes: int = 1) -> int:
    """Messages one of ``processes`` intake processes may be receiving at once, of every kind
    together: its share of ``--grpc-receive-bytes`` over the largest message, at least two where
    streams take turns (one they may hold, one kept for unary calls) and one where they do not.

    Why two: streams hold all but one turn, and with one turn an idle stream held it while every
    unary call of the process waited (four intakes, as on a 16-core machine, share the default
    96 MiB as 24 MiB each: one 16 MiB turn apiece)."""
    least = 2 if s.grpc_stream_reads_per_peer else 1
    return max(least, _share(s.grpc_receive_bytes, processes) // s.grpc_max_message_bytes)


def grpc_limits(s: Settings, processes: int = 1) -> GrpcLimits:
    """The gRPC listener's limits of one of ``processes`` intake processes: grpc counts calls per
    server, and a peer's message turns (unary and streamed) are kept per process (its connections
    spread over them), so each process gets its share of these server-wide caps. A peer's turns
    are at most what all peers together may hold.

    One address may hold at most half of a process's share of the calls: with the share equal to
    the per-peer cap (1,024 each for two intakes), one client's never-finished calls held every
    slot of a process, and grpc refused everyone else ("Concurrent RPC limit exceeded!")."""
    calls = _share(s.grpc_max_concurrent_rpcs, processes)
    reads_total = receive_turns(s, processes)
    stream_reads_total = max(1, reads_total - 1)  # one turn always left to unary calls
    return GrpcLimits(
        s.grpc_max_concurrent_streams,
        calls,
        s.grpc_min_ping_interval_secs,
        s.grpc_max_ping_strikes,
        s.grpc_max_metadata_bytes,
        s.grpc_max_connection_idle_secs,
        min(s.grpc_max_calls_per_peer, max(1, calls // 2)),
        s.grpc_request_timeout_secs,
        s.grpc_write_timeout_secs,
        min(_share(s.grpc_reads_per_peer, processes), reads_total),
        min(_share(s.grpc_stream_reads_per_peer, processes), stream_reads_total),
        s.grpc_idle_stream_secs,
        reads_total,
        stream_reads_total,
        s.grpc_stream_first_message_secs,
    )


def public_grpc_server(
    plane: Any,
    s: Settings,
    security: ServerSecurity,
    processes: int = 1,
    servicer: Any = None,
    cutoff: DrainCutoff | None = None,
) -> grpc.aio.Server:
    """The public gRPC listener; with several intake processes they share the port (SO_REUSEPORT),
    each with its share of the limits (``grpc_limits``)."""
    return create_grpc_server(
        plane,
        f"{s.host}:{s.grpc_port}",
        s.grpc_max_message_bytes,
        security.grpc_interceptors(),
        security.grpc_credentials(),
        grpc_limits(s, processes),
        s.max_response_bytes,
        servicer=servicer,
        reuse_port=processes > 1,
        cutoff=cutoff,
    )


def reuse_port_socket(host: str, port: int, listen: bool) -> socket.socket:
    """A TCP socket bound with SO_REUSEPORT: intake processes each listen on one, and the kernel
    spreads connections over them; the model process binds one without listening to hold the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen:
            sock.listen(2048)
            sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
