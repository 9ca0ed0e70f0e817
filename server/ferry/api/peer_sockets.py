"""Close one client's TCP connection to this process, found by its address.

Why: the fallback of the gRPC write deadline (``grpc_calls.WriteDeadlines``). A call whose client
stops reading is normally ended alone (``grpc_cancel.py``); when this grpcio gives no way to, or
the ended call is still not over after a grace, the client would hold its answer in core for as
long as it keeps the connection open. Shutting the connection's socket down makes core see the
connection end, which cancels all its calls and frees what they hold, exactly as if the client had
gone. The socket is found among this process's descriptors by its peer address and local port.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection

FD_DIR = "/proc/self/fd"


def _address(peer: str) -> tuple[str, int] | None:
    """grpc's peer string ("ipv4:1.2.3.4:5678", "ipv6:[::1]:5678") as (host, port); None otherwise."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


def _unmapped(host: str) -> str:
    """An IPv4 address as a dual-stack socket reports it ("::ffff:1.2.3.4") in its plain form."""
    return host.removeprefix("::ffff:")


def close_peer_connections(peer: str, local_ports: Collection[int]) -> int:
    """Shut down the TCP connections from ``peer`` to one of ``local_ports``; returns how many.

    Only the connection itself is touched (``shutdown`` on a duplicate of its descriptor): the
    descriptor stays the owner's, who sees the connection end and closes it as usual."""
    address = _address(peer)
    if address is None:
        return 0
    host, port = _unmapped(address[0]), address[1]
    closed = 0
    for name in os.listdir(FD_DIR):
        try:
            if not os.readlink(f"{FD_DIR}/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:  # closed meanwhile, or not a socket after all
            continue
        try:
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                continue
            remote, local = sock.getpeername(), sock.getsockname()
            if _unmapped(remote[0]) == host and remote[1] == port and local[1] in local_ports:
                sock.shutdown(socket.SHUT_RDWR)
                closed += 1
        except OSError:  # a listening socket (no peer), or one that closed meanwhile
            continue
        finally:
            sock.close()
    return closed
