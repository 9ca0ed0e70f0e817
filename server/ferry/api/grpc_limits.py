"""Connection-level limits of the gRPC listener, as gRPC core channel arguments.

gRPC core bounds what it is told to: without these, one client can open thousands of streams per
connection (each holding buffers until it finishes), ping without limit and keep idle connections
forever. ``max_concurrent_rpcs`` bounds unfinished calls server-wide, so memory held by streams is
bounded however many connections a client opens; calls past it get RESOURCE_EXHAUSTED at once,
from ``CallGuard`` (grpc_calls.py), whose count is exact. grpc's own limit sits
``REFUSALS_IN_FLIGHT`` above it, as a backstop.
``max_calls_per_peer``, ``request_timeout_secs`` and ``stream_first_message_secs`` keep one client
from holding all of them, and
``write_timeout_secs`` ends a call whose client does not take its answer (``grpc_calls.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Calls the guard may be refusing at once on top of those it holds. grpc counts a call from its
#: arrival until its status is sent, refusals included: with its limit equal to the guard's, one
#: address at its cap and a burst of its refused calls filled grpc's count for an instant, and grpc
#: refused other clients ("Concurrent RPC limit exceeded!"). Each holds at most its stream's 64 KiB
#: window: 8 MiB in all.
REFUSALS_IN_FLIGHT = 128


@dataclass(frozen=True)
class GrpcLimits:
    """The options (see settings.py)."""

    max_concurrent_streams: int = 1000
    max_concurrent_rpcs: int = 2048
    min_ping_interval_secs: float = 10.0
    max_ping_strikes: int = 2
    max_metadata_bytes: int = 16 * 1024
    max_connection_idle_secs: float = 300.0
    max_calls_per_peer: int = 1024
    request_timeout_secs: float = 60.0
    write_timeout_secs: float = 30.0
    reads_per_peer: int = 2
    stream_reads_per_peer: int = 5  # at most stream_reads_total
    idle_stream_secs: float = 60.0
    reads_total: int = 6  # every kind of turn together (front_doors.receive_turns: the defaults' 96 / 16 MiB)
    stream_reads_total: int = 5  # all but one of them
    stream_first_message_secs: float = 60.0

    @property
    def grpc_maximum_concurrent_rpcs(self) -> int:
        """grpc's own limit: the calls the guard holds, and those it is refusing."""
        return self.max_concurrent_rpcs + REFUSALS_IN_FLIGHT

    def channel_options(self) -> list[tuple[str, int]]:
        return [
            # no window grown ahead of the reads: a call waiting for its peer's turn (grpc_calls.py)
            # then holds its initial 64 KiB window, not its whole message
            ("grpc.http2.bdp_probe", 0),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            ("grpc.http2.min_ping_interval_without_data_ms", round(self.min_ping_interval_secs * 1000)),
            ("grpc.http2.max_ping_strikes", self.max_ping_strikes),
            ("grpc.max_metadata_size", self.max_metadata_bytes),
            ("grpc.max_connection_idle_ms", round(self.max_connection_idle_secs * 1000)),
        ]
