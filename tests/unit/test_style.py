"""The gate CI runs on every change: ruff-clean, ruff-formatted, and mypy-clean over ``server/`` and
``clients/`` at the strictness ``[tool.mypy]`` in pyproject.toml sets (and explains)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> str:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    return ruff


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [_ruff(), "check", "--output-format", "concise", str(ROOT)], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = subprocess.run([_ruff(), "format", "--check", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    """Zero type errors. The cache (.mypy_cache) makes a rerun take seconds; a fresh run about 15 s of CPU."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--show-error-codes"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, "mypy found type errors:\n" + result.stdout + result.stderr
