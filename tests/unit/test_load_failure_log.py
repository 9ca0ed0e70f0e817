"""A model that fails to load is logged once, with its reason, whoever asked for the load."""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import pytest

from ferry.errors import ModelLoadError
from ferry.repository.manager import ControlMode, ModelManager

REPO = Path(__file__).resolve().parents[2] / "model_repo"


def corrupt_repository(root: Path) -> Path:
    """simple, plus 'corrupt' (simple's config over a model file that is not ONNX)."""
    shutil.copytree(REPO / "simple", root / "simple")
    (root / "corrupt" / "1").mkdir(parents=True)
    config = (REPO / "simple" / "config.pbtxt").read_text().replace('name: "simple"', 'name: "corrupt"')
    (root / "corrupt" / "config.pbtxt").write_text(config)
    (root / "corrupt" / "1" / "model.onnx").write_bytes(b"not a model")
    return root


def failure_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "corrupt" in r.getMessage()]


def test_start_up_failure_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = ModelManager(corrupt_repository(tmp_path))

    async def run() -> None:
        await manager.start()
        await manager.stop()

    with caplog.at_level(logging.ERROR):
        asyncio.run(run())
    [line] = failure_lines(caplog)
    assert line.startswith("failed to load 'corrupt': version 1: onnxruntime cannot load corrupt/1/model.onnx")


def test_api_load_failure_is_logged_once_and_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = ModelManager(corrupt_repository(tmp_path), control_mode=ControlMode.EXPLICIT)

    async def run() -> None:
        await manager.start()
        try:
            with pytest.raises(ModelLoadError, match="failed to load 'corrupt': version 1"):
                await manager.load("corrupt")
        finally:
            await manager.stop()

    with caplog.at_level(logging.ERROR):
        asyncio.run(run())
    assert len(failure_lines(caplog)) == 1
