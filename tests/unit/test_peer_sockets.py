"""``close_peer_connections`` shuts down exactly the connections of one peer to the given ports."""

from __future__ import annotations

import socket

from ferry.api.peer_sockets import close_peer_connections


def _pair(server: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(server.getsockname()[:2])
    accepted, _ = server.accept()
    return client, accepted


def test_only_the_named_peer_on_the_named_port_is_cut() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_server(("127.0.0.1", 0)) as other:
        port = server.getsockname()[1]
        victim, victim_end = _pair(server)
        bystander, bystander_end = _pair(server)
        elsewhere, elsewhere_end = _pair(other)
        try:
            host, peer_port = victim.getsockname()[:2]
            assert close_peer_connections(f"ipv4:{host}:{peer_port}", {port}) == 1
            victim.settimeout(5)
            assert victim.recv(1) == b""  # the server side shut the connection down
            for kept in (bystander, elsewhere):
                kept.setblocking(False)
                try:
                    kept.recv(1)
                    raise AssertionError("a connection of another peer was closed")
                except BlockingIOError:
                    pass  # still open, nothing to read
            # the same peer address on a port not named is left alone
            host, peer_port = elsewhere.getsockname()[:2]
            assert close_peer_connections(f"ipv4:{host}:{peer_port}", {port}) == 0
            assert close_peer_connections("unix:/tmp/x.sock", {port}) == 0
        finally:
            for sock in (victim, victim_end, bystander, bystander_end, elsewhere, elsewhere_end):
                sock.close()
