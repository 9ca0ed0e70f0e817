"""Triton's model-config QA situations (qa/L0_model_config), re-created with our own configs.

Each file in ``triton_configs/qa`` names the Triton case it re-creates and what Triton expects:
``# expect: load`` or a message the refusal must contain. The model is loaded for real, through
the repository manager, with the bundled ``simple`` ONNX model as its version 1, so a case that
should load runs ONNX Runtime and a case that should fail fails the way a server would report it:
``failed to load '<model>'`` with the reason, naming the model and never a server path.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from ferry.errors import ModelLoadError
from ferry.repository.manager import ControlMode, ModelManager

CASES = Path(__file__).parent / "triton_configs" / "qa"
SIMPLE_MODEL = Path(__file__).resolve().parents[2] / "model_repo" / "simple" / "1" / "model.onnx"


def expectation(path: Path) -> tuple[str, str]:
    """The Triton case a file re-creates and its expected outcome, from its header comments."""
    header = dict(
        line[2:].split(": ", 1) for line in path.read_text().splitlines() if line.startswith("# ") and ": " in line
    )
    return header["triton-case"], header["expect"]


def load_case(repository: Path, name: str, config_text: str) -> list[dict[str, str]]:
    """Put the case in a repository of its own and load it in explicit mode; raises on failure,
    else returns the repository index while the model is loaded."""
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True)
    shutil.copy(SIMPLE_MODEL, model_dir / "1" / "model.onnx")
    (model_dir / "config.pbtxt").write_text(config_text)
    manager = ModelManager(repository, ControlMode.EXPLICIT)

    async def run() -> list[dict[str, str]]:
        await manager.start()
        try:
            await manager.load(name)
            return manager.index()
        finally:
            await manager.stop()

    return asyncio.run(run())


@pytest.mark.parametrize("path", sorted(CASES.glob("*.pbtxt")), ids=lambda p: p.stem)
def test_triton_qa_case(path: Path, tmp_path: Path) -> None:
    _, expected = expectation(path)
    name = path.stem
    if expected == "load":
        assert [(row["name"], row["state"]) for row in load_case(tmp_path, name, path.read_text())] == [(name, "READY")]
        return
    with pytest.raises(ModelLoadError) as failure:
        load_case(tmp_path, name, path.read_text())
    message = failure.value.message
    assert message.startswith(f"failed to load '{name}'"), message
    assert expected in message, message
    assert str(tmp_path) not in message, message


def test_case_counts() -> None:
    """Keeps the report honest: how many Triton cases are re-created, and how many should load."""
    cases = [expectation(p) for p in CASES.glob("*.pbtxt")]
    triton = [c for c in cases if c[0] != "-"]
    assert len([c for c in triton if c[0].startswith("noautofill_platform/")]) == 59
    assert len([c for c in cases if c[1] == "load"]) == 15
