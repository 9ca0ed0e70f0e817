"""The tests' servers start on ports no client connection can take (``conftest.free_port``), and a
start that finds its port taken anyway (another test session's server) is tried again elsewhere."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import conftest

from ..conftest import MODEL_REPO, start_server


def test_free_ports_lie_below_the_ephemeral_range_and_are_free() -> None:
    low, _ = conftest._ephemeral_ports()
    ports = [conftest.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    for port in ports:
        assert conftest._PORT_FLOOR <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def _ports_after(first: int, free_port: Callable[[], int]) -> Iterator[int]:
    yield first
    while True:
        yield free_port()


def test_a_start_that_finds_its_port_taken_is_tried_again_on_other_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as holder:  # what another session's server would hold
        holder.bind(("127.0.0.1", conftest.free_port()))
        holder.listen()
        taken = holder.getsockname()[1]
        ports = _ports_after(taken, conftest.free_port)  # the real one, before it is replaced
        handed: list[int] = []

        def next_port() -> int:
            handed.append(next(ports))
            return handed[-1]

        monkeypatch.setattr(conftest, "free_port", next_port)
        server = start_server(MODEL_REPO, tmp_path / "server.log", "--model-control-mode", "explicit")
        try:
            assert handed[0] == taken and len(handed) == 6  # two starts, three ports each
            assert server.http_port != taken
            with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=10) as response:
                assert response.status == 200
        finally:
            server.stop()


def test_a_start_that_fails_for_another_reason_is_not_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[int] = []
    real = conftest.free_port

    def counted() -> int:
        handed.append(real())
        return handed[-1]

    monkeypatch.setattr(conftest, "free_port", counted)
    with pytest.raises(RuntimeError, match="server exited") as failure:
        start_server(tmp_path / "no such repository", tmp_path / "server.log")
    assert not isinstance(failure.value, conftest.PortTaken)
    assert len(handed) == 3
