"""The gate CI runs on every change: ruff-clean, ruff-formatted, and mypy-clean over ``server/`` and
``clients/`` at the strictness ``[tool.mypy]`` in pyproject.toml sets (and explains)."""

from __future__ import annotations

import os
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


def _mypy_cache() -> Path:
    """Where mypy keeps its incremental cache: outside the checkout (``$FERRY_MYPY_CACHE``, else the
    user's cache directory), so that a fresh clone, as CI makes, reuses what an earlier run checked,
    a rerun takes seconds instead of a full check (minutes on a busy machine). Safe to share: mypy
    trusts a cached module only while its source file, its dependencies and the options match, and
    checks it again otherwise; one directory per mypy and Python version."""
    import mypy.version

    base = os.environ.get("FERRY_MYPY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "ferry", "mypy"
    )
    return Path(base) / f"mypy-{mypy.version.__version__}-py{sys.version_info[0]}.{sys.version_info[1]}"


def test_mypy_is_clean() -> None:
    """Zero type errors. With its cache a rerun takes seconds; a fresh run about 15 s of CPU."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--show-error-codes", "--cache-dir", str(_mypy_cache())],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, "mypy found type errors:\n" + result.stdout + result.stderr
