"""Repository and front-door failures from issue 15 that need no running server: a poll pass that
meets an unreadable model directory, and the connection a REST 500 leaves behind."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ferry.api.dataplane import DataPlane
from ferry.api.http import create_http_app
from ferry.repository.manager import ControlMode, ModelManager
from ferry.types import InferenceRequest

from ..conftest import MODEL_REPO


def _unreadable_below(monkeypatch: pytest.MonkeyPatch, locked: Path) -> None:
    """Make everything under ``locked`` raise EACCES, as a chmod 000 directory does for a non-root
    user (tests often run as root, which permissions do not stop)."""
    for method in ("is_file", "is_dir", "stat", "rglob", "iterdir", "read_text"):
        original = getattr(Path, method)
        listing = method in ("rglob", "iterdir")  # the directory itself can be stat'ed, not listed

        def guarded(self: Path, *args, _original=original, _listing=listing, **kwargs):
            if locked in self.parents or (_listing and self == locked):
                raise PermissionError(13, "Permission denied", str(self))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Path, method, guarded)


def test_poll_survives_an_unreadable_model_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    shutil.copytree(MODEL_REPO / "simple", repo / "locked")
    (repo / "locked" / "config.pbtxt").write_text(
        (repo / "locked" / "config.pbtxt").read_text().replace('name: "simple"', 'name: "locked"')
    )
    _unreadable_below(monkeypatch, repo / "locked")

    async def run() -> None:
        manager = ModelManager(repo, control_mode=ControlMode.POLL, poll_interval=3600)
        await manager.start()
        try:
            assert manager.is_ready("simple")
            rows = {row["name"]: row for row in manager.index()}
            assert rows["locked"]["state"] == "UNAVAILABLE"
            assert "Permission denied" in rows["locked"]["reason"]
            # later passes still do their work: a new model loads, a removed one unloads
            shutil.copytree(MODEL_REPO / "simple", repo / "added")
            (repo / "added" / "config.pbtxt").write_text(
                (repo / "added" / "config.pbtxt").read_text().replace('name: "simple"', 'name: "added"')
            )
            shutil.rmtree(repo / "simple")
            await manager.poll_once()
            assert manager.is_ready("added") and not manager.is_ready("simple")
            assert "Permission denied" in {row["name"]: row for row in manager.index()}["locked"]["reason"]
        finally:
            await manager.stop()

    asyncio.run(run())


def test_an_unexpected_500_closes_the_keep_alive_connection() -> None:
    """After an internal error the connection's state is unknown: say so with Connection: close
    instead of resetting it under the client's next request."""

    class BrokenPlane(DataPlane):
        def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
            raise RuntimeError("index exploded")

    app = create_http_app(BrokenPlane(ModelManager(MODEL_REPO)))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v2/repository/index", json={})
    assert response.status_code == 500
    assert response.json() == {"error": "internal error: index exploded"}
    assert response.headers["connection"] == "close"


def test_a_request_that_meets_a_retired_version_runs_on_its_replacement(tmp_path: Path) -> None:
    """Reloads drop nothing: an image request looks its model up, decodes (awaiting), and may reach
    the scheduler only after a reload retired that version; it then runs on the replacing one."""
    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")

    async def run() -> None:
        manager = ModelManager(repo, control_mode=ControlMode.EXPLICIT, startup_models=["simple"])
        await manager.start()
        plane = DataPlane(manager)
        try:
            looked_up = manager.get("simple")
            await manager.load("simple")  # reload: the new copy is READY, the old one retired
            assert manager.get("simple") is not looked_up
            inputs = {"INPUT0": np.ones((1, 16), np.int32), "INPUT1": np.ones((1, 16), np.int32)}
            request = InferenceRequest("simple", inputs=inputs, input_datatypes=dict.fromkeys(inputs, "INT32"))
            executed = await plane.path.serve(looked_up, request, ["OUTPUT0"])
            assert executed.model is manager.get("simple")
            assert executed.tensors()[0]["OUTPUT0"].tolist() == [[2] * 16]
        finally:
            await manager.stop()

    asyncio.run(run())
