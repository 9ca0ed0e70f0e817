"""Two ensembles that name each other (Triton QA's ``circular_dependency``) loaded at start-up.

Both loads run at once there, each holding its own model's lock while it waits for the other:
the server must fail both with a message naming the cycle and become ready; SIGTERM must stop it
at any point, even while a model is still loading.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from ..conftest import RunningServer, start_server
from ..ensembles.repo import add_ensemble, add_simple, scheduling, step, tensors

IO = "max_batch_size: 8\n" + tensors("input", "A", "B") + tensors("output", "SUM", "DIFF")
AB = {"INPUT0": "A", "INPUT1": "B"}
SUMS = {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}


def _cycle_repository(root: Path) -> Path:
    repo = root / "models"
    add_simple(repo)
    add_ensemble(repo, "ping", IO + scheduling(step("pong", {"A": "A", "B": "B"}, {"SUM": "SUM", "DIFF": "DIFF"})))
    add_ensemble(repo, "pong", IO + scheduling(step("ping", {"A": "A", "B": "B"}, {"SUM": "SUM", "DIFF": "DIFF"})))
    add_ensemble(repo, "fine", IO + scheduling(step("simple", AB, SUMS)))
    return repo


def _index(server: RunningServer) -> dict[str, dict]:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return {row["name"]: row for row in json.load(response)}


@pytest.mark.parametrize(
    "mode", [("--model-control-mode", "none"), ("--model-control-mode", "explicit", "--load-model", "*")]
)
def test_a_cycle_of_ensembles_fails_both_loads_at_start_up(tmp_path: Path, mode: tuple[str, ...]) -> None:
    server = start_server(_cycle_repository(tmp_path), tmp_path / "server.log", *mode, timeout=60)
    try:
        rows = _index(server)
        assert rows["simple"]["state"] == "READY" and rows["fine"]["state"] == "READY"
        for name in ("ping", "pong"):
            assert rows[name]["state"] == "UNAVAILABLE", rows[name]
            assert "circular dependency: " in rows[name]["reason"]
            assert "ping -> pong" in rows[name]["reason"] or "pong -> ping" in rows[name]["reason"]
    finally:
        assert server.stop(timeout=20) == 0


def test_sigterm_stops_a_server_whose_models_are_still_loading(tmp_path: Path) -> None:
    """A Python model whose initialize() waits on a file holds the start-up; SIGTERM still stops it."""
    repo = tmp_path / "models"
    (repo / "slow" / "1").mkdir(parents=True)
    gate = tmp_path / "gate"
    (repo / "slow" / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    (repo / "slow" / "1" / "model.py").write_text(
        "import pathlib, time\n\n\nclass TritonPythonModel:\n    def initialize(self, args):\n"
        f"        (pathlib.Path({str(tmp_path)!r}) / 'loading').write_text('1')\n"
        f"        while not pathlib.Path({str(gate)!r}).exists():\n            time.sleep(0.05)\n\n"
        "    def execute(self, requests):\n        return []\n"
    )
    server = start_server(repo, tmp_path / "server.log", "--allow-python-models", wait_ready=False)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "loading").exists():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        # the gate never opens: the load thread cannot be interrupted, and the server must not wait for it
        assert server.process.wait(timeout=20) == 0
        assert "stop requested during start-up" in server.log()
    except subprocess.TimeoutExpired:
        pytest.fail(f"SIGTERM did not stop the server during start-up:\n{server.log()}")
    finally:
        server.stop()
