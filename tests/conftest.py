"""Shared fixtures: a real Ferry server started as a subprocess on free loopback ports."""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import importlib.util
import io
import itertools
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from ferry.cli_errors import PORT_TAKEN_LINES

ROOT = Path(__file__).resolve().parents[1]
MODEL_REPO = ROOT / "model_repo"
#: Example models that need an extra (ferry[torch]), kept out of the default repository.
EXTRAS_REPO = ROOT / "model_repo_extras"


#: Hypothesis' settings, made here only (tests set nothing but their own max_examples): no per-example
#: deadline and no health checks that time or size generation (a busy CI machine made those fail at
#: random), and a fixed seed, so every run tries the same cases and a failure reproduces.
#: HYPOTHESIS_PROFILE=explore draws new cases each run, for looking for bugs by hand.
_TIMING_HEALTH_CHECKS = [
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.filter_too_much,
    HealthCheck.large_base_example,
    HealthCheck.function_scoped_fixture,
]
hypothesis_settings.register_profile(
    "ferry", deadline=None, derandomize=True, database=None, suppress_health_check=_TIMING_HEALTH_CHECKS
)
hypothesis_settings.register_profile("explore", deadline=None, suppress_health_check=_TIMING_HEALTH_CHECKS)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ferry"))


def pytest_sessionstart(session: pytest.Session) -> None:
    """The OCR models of ``model_repo/`` are committed; should one be missing (a sparse checkout),
    copy it from the rapidocr-onnxruntime wheel, so every test that serves the repository finds them.
    And the server and client packages are byte-compiled once (``_byte_compile``)."""
    from tests.ocr_reference import ensure_models

    ensure_models()
    _byte_compile()


def _byte_compile() -> None:
    """Write the ``__pycache__`` of ``ferry`` and ``ferry_client`` when the environment keeps Python
    from writing it (PYTHONDONTWRITEBYTECODE, set on the shared machine issue 40 timed the suite on):
    else every server the suite starts, and each of its intake processes, compiles the whole stack
    from source, 0.2-0.4 CPU seconds an interpreter, where an installed package (pip compiles it)
    reads bytecode."""
    if sys.flags.dont_write_bytecode:
        for package in (ROOT / "server" / "ferry", ROOT / "clients" / "python" / "ferry_client"):
            compileall.compile_dir(package, quiet=1)


def pytest_report_header() -> str:
    """Which OpenCV the run uses: the pixel and reference tests are exact only under the pinned one."""
    from tests.opencv_pixels import describe_installed

    return f"opencv: {describe_installed()}"


def _ephemeral_ports() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (Linux's default where unreadable)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


#: Where the tests' servers listen: below the ephemeral range, so no client's connect can take a
#: port between the check that it is free and the server's bind (a port from ``bind(0)`` is in that
#: range: a server start once failed with "address already in use"). Each session walks it from
#: a random start, so two sessions on one machine rarely meet, and ``start_server`` retries then.
_PORT_FLOOR = 10000
_EPHEMERAL_LOW = _ephemeral_ports()[0]
_next_ports = itertools.count(random.SystemRandom().randrange(max(_EPHEMERAL_LOW - _PORT_FLOOR, 1)))


def free_port() -> int:
    """A loopback port nothing listens on, outside the ephemeral range (see ``_PORT_FLOOR``)."""
    span = _EPHEMERAL_LOW - _PORT_FLOOR
    if span < 1024:  # an unusual range leaves no room below it: any free port
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    for _ in range(span):
        port = _PORT_FLOOR + next(_next_ports) % span
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORT_FLOOR}-{_EPHEMERAL_LOW - 1}")


class Payload:
    """Unpickling this creates the marker directory: proof that something was unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


@dataclass
class RunningServer:
    """A server process and where to reach it."""

    process: subprocess.Popen
    http_port: int
    grpc_port: int
    metrics_port: int
    repository: Path
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def said(self, line: str, count: int, since: int) -> None:
        """Until the log after character ``since`` holds ``line`` ``count`` times (a hang guard of
        60 s only): a test goes on from a state the server reports, not one it hopes for."""
        for _ in range(1200):
            if self.log()[since:].count(line) >= count:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the server did not say {line!r} {count} times")

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_quick_server(root: Path, *extra: str, **options: Any) -> RunningServer:
    """``start_server`` on a repository of one tiny MLP, ``quick`` (width 16): the model of the tests
    of the front doors' limits, where what the model computes does not matter."""
    from tests.models import write_mlp_model

    write_mlp_model(root / "models" / "quick", width=16, layers=1)
    return start_server(root / "models", root / "server.log", *extra, **options)


def start_server(
    repository: Path,
    log_path: Path,
    *extra: str,
    wait_ready: bool = True,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    probe_tls: ssl.SSLContext | None = None,
    probe_headers: dict[str, str] | None = None,
    cwd: Path | None = None,
    launcher: list[str] | None = None,
) -> RunningServer:
    """Start ``ferry serve`` on free ports and wait until /v2/health/ready answers 200.

    A server started with TLS or auth needs ``probe_tls`` / ``probe_headers`` for that wait;
    ``launcher`` replaces ``python -m ferry`` (the ``ferry`` console script, say), run in ``cwd``.
    A start that finds a port taken after all (another test session's server) is tried again on
    other ports."""
    arguments = (repository, log_path, extra, wait_ready, timeout, env, probe_tls, probe_headers, cwd, launcher)
    for _ in range(PORT_ATTEMPTS - 1):
        with contextlib.suppress(PortTaken):
            return _start_server_once(*arguments)
    return _start_server_once(*arguments)


#: Starts of one server tried before a port taken at its bind fails the test.
PORT_ATTEMPTS = 3


class PortTaken(RuntimeError):
    """The server exited at its start because one of its ports was taken."""


def _start_server_once(
    repository: Path,
    log_path: Path,
    extra: tuple[str, ...],
    wait_ready: bool,
    timeout: float,
    env: dict[str, str] | None,
    probe_tls: ssl.SSLContext | None,
    probe_headers: dict[str, str] | None,
    cwd: Path | None,
    launcher: list[str] | None,
) -> RunningServer:
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    cmd = [
        *(launcher or [sys.executable, "-m", "ferry"]),
        "serve",
        "--model-repository",
        str(repository),
        "--host",
        "127.0.0.1",
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--metrics-port",
        str(metrics_port),
        *extra,
    ]
    log_file = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    server = RunningServer(process, http_port, grpc_port, metrics_port, repository, log_path)
    deadline = time.monotonic() + timeout
    url = f"{'https' if probe_tls else 'http'}://127.0.0.1:{http_port}/v2/health/{'ready' if wait_ready else 'live'}"
    probe = urllib.request.Request(url, headers=probe_headers or {})
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = server.log()
            failure = PortTaken if any(taken in log for taken in PORT_TAKEN_LINES) else RuntimeError
            raise failure(f"server exited with {process.returncode}:\n{log}")
        try:
            with urllib.request.urlopen(probe, timeout=1, context=probe_tls) as response:
                if response.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"server did not become ready in {timeout}s:\n{server.log()}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The bundled example repository served in explicit mode with every model loaded (and system
    shared memory allowed, for the tests of that extension)."""
    repo = tmp_path_factory.mktemp("repo") / "models"
    shutil.copytree(MODEL_REPO, repo)
    running = start_server(
        repo,
        repo.parent / "server.log",
        *("--model-control-mode", "explicit", "--load-model", "*", "--allow-shared-memory"),
    )
    yield running
    running.stop()


@pytest.fixture(scope="session")
def digit_pngs() -> tuple[list[bytes], np.ndarray]:
    """The digits classifier's held-out test set written as 8x8 grayscale PNG files, with labels."""
    from PIL import Image
    from sklearn.datasets import load_digits

    split = np.load(MODEL_REPO / "digits" / "test_split.npz")
    digits = load_digits()
    files = []
    for index in split["test_indices"]:
        pixels = np.round(digits.images[index] * 255 / 16).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels, mode="L").save(buffer, format="PNG")
        files.append(buffer.getvalue())
    return files, digits.target[split["test_indices"]]


def detector_module() -> ModuleType:
    """model_repo/digit_detector/build.py, for its held-out scenes and mAP evaluation."""
    spec = importlib.util.spec_from_file_location("digit_detector_build", MODEL_REPO / "digit_detector" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
