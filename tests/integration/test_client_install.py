"""Installs into fresh virtual environments, as the README's first command does: ferry-client alone
(without the server's dependencies), and the server with ``pip install .`` from a clean source tree
(nothing but PyPI needed: the client package ships inside the server's distribution)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import urllib.request
import venv
from pathlib import Path

import pytest

from ..conftest import MODEL_REPO, ROOT, free_port

SERVER_ONLY = ("ferry", "onnxruntime", "onnx", "fastapi", "uvicorn", "starlette", "PIL", "prometheus_client")


def fresh_venv_with(env_dir: Path, target: Path) -> Path:
    """A new virtual environment with ``pip install TARGET`` done; returns its python."""
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(target)],
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return python


def clean_tree(destination: Path) -> Path:
    """The files a fresh clone has (tracked, plus new ones not ignored), without build leftovers."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file() and not name.startswith(("model_repo", "tests/", "benchmarks/", "docs/")):
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def assert_client_works(python: Path, *clients: str, prelude: str = "") -> None:
    """In that environment: ``simple`` answers through each client expression (``HttpClient(url)``, ...),
    and the ``ferry-client`` command runs."""
    check = f"""{prelude}
import numpy as np
from ferry_client import GrpcClient, HttpClient
x = np.arange(16, dtype=np.int32)[None]
for client in ({", ".join(clients)},):
    with client:
        assert (client.infer("simple", {{"INPUT0": x, "INPUT1": x}})["OUTPUT0"] == 2 * x).all()
print("ok")
"""
    result = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=60, cwd=python.parent)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
    helped = subprocess.run(
        [str(python.parent / "ferry-client"), "perf", "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0 and "--concurrency-range" in helped.stdout


@pytest.mark.timeout(600)
def test_client_installs_alone_and_works(tmp_path, server) -> None:
    env_dir = tmp_path / "venv"
    python = fresh_venv_with(env_dir, ROOT / "clients" / "python")
    no_server = f"""
import importlib.util
absent = [m for m in {SERVER_ONLY!r} if importlib.util.find_spec(m) is not None]
assert not absent, f"server dependencies pulled in: {{absent}}"
"""
    assert_client_works(
        python, f"HttpClient({server.http_url!r})", f"GrpcClient({server.grpc_url!r})", prelude=no_server
    )


@pytest.mark.timeout(900)
def test_pip_install_dot_serves_the_default_repository(tmp_path) -> None:
    """``pip install . && ferry serve model_repo`` from a clean tree, then the client that came with it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know which files a clone has")
    env_dir = tmp_path / "venv"
    python = fresh_venv_with(env_dir, clean_tree(tmp_path / "clone"))
    shutil.copytree(MODEL_REPO, tmp_path / "model_repo")
    http_port = free_port()
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [str(env_dir / "bin" / "ferry"), "serve", "model_repo", "--http-port", str(http_port)]
        + ["--grpc-port", str(free_port()), "--metrics-port", str(free_port())],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        assert_client_works(python, f"HttpClient('127.0.0.1:{http_port}')")
    finally:
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(60)
        log.close()
    text = (tmp_path / "server.log").read_text()
    assert exit_code == 0, text
    assert "ERROR" not in text and "| READY " in text and "UNAVAILABLE" not in text
