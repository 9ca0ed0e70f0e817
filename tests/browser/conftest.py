"""A real headless browser for the dashboard tests: Debian's chromium driven by Playwright.

Playwright's own browser downloads are never used: the tests point Playwright at the system
chromium, and skip (with the reason) only when that executable is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import ROOT

ARTIFACTS = ROOT / "tests" / "artifacts"
PLAYWRIGHT_MISSING = "playwright is in the test extra: pip install -e .[test]"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_executable() -> str | None:
    """FERRY_CHROMIUM if set, else Debian's /usr/bin/chromium, else chromium on PATH."""
    for candidate in (os.environ.get("FERRY_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Module-scoped on purpose: Playwright's sync API keeps an event loop running in this thread
    while it is open, which would break every asyncio test that runs after it."""
    executable = chromium_executable()
    if executable is None:
        pytest.skip(
            "no chromium executable (install Debian's package: apt-get install chromium; or set FERRY_CHROMIUM)"
        )
    sync_api = pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING)
    with sync_api.sync_playwright() as playwright:
        # Playwright gives every launch a fresh temporary profile (--user-data-dir) and removes it after.
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where screenshots go (git-ignored)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
