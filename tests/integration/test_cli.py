"""``ferry`` as a user runs it: the start-up log shows every model's state and every port, and a
mistake ends the process with one line and a non-zero exit code (the in-process cases are in
tests/unit/test_cli_errors.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..conftest import MODEL_REPO, RunningServer


def test_startup_log_has_the_model_table_and_all_ports(server: RunningServer) -> None:
    log = server.log()
    for model in sorted(p.name for p in MODEL_REPO.iterdir() if (p / "config.pbtxt").is_file()):
        assert f"| {model} " in log.split("ferry ready")[0], model
    rows = [line for line in log.splitlines() if line.startswith("| ") and "| Model" not in line]
    assert rows and all("| READY " in row for row in rows), rows  # the default repository loads cleanly
    assert "ERROR" not in log.split("ferry ready")[0]
    assert (
        f"ferry ready: REST 127.0.0.1:{server.http_port}, gRPC 127.0.0.1:{server.grpc_port}, "
        f"metrics 127.0.0.1:{server.metrics_port}"
    ) in log


def test_a_mistake_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ferry", "serve", str(tmp_path / "no_such_repository")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"ferry: model repository '{tmp_path / 'no_such_repository'}' does not exist "
        "(give a directory of models, e.g. model_repo)"
    ]


def test_a_model_directory_as_the_repository_is_refused() -> None:
    """``ferry serve model_repo/digits`` would serve a "model 1" UNAVAILABLE and nothing else."""
    done = subprocess.run(
        [sys.executable, "-m", "ferry", "serve", str(MODEL_REPO / "digits")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"ferry: model repository '{MODEL_REPO / 'digits'}' holds config.pbtxt: this looks like a model "
        f"directory; give its parent ('{MODEL_REPO}')"
    ]
