"""ferry-client installs alone in a fresh virtual environment, without the server's dependencies."""

from __future__ import annotations

import subprocess
import venv

import pytest

from ..conftest import ROOT

SERVER_ONLY = ("ferry", "onnxruntime", "onnx", "fastapi", "uvicorn", "starlette", "PIL", "prometheus_client")


@pytest.mark.timeout(600)
def test_client_installs_alone_and_works(tmp_path, server) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT / "clients" / "python")],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    check = f"""
import importlib.util, numpy as np
absent = [m for m in {SERVER_ONLY!r} if importlib.util.find_spec(m) is not None]
assert not absent, f"server dependencies pulled in: {{absent}}"
from ferry_client import GrpcClient, HttpClient
x = np.arange(16, dtype=np.int32)[None]
with HttpClient({server.http_url!r}) as h, GrpcClient({server.grpc_url!r}) as g:
    for client in (h, g):
        assert (client.infer("simple", {{"INPUT0": x, "INPUT1": x}})["OUTPUT0"] == 2 * x).all()
print("ok")
"""
    result = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
    helped = subprocess.run(
        [str(env_dir / "bin" / "ferry-client"), "perf", "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0 and "--concurrency-range" in helped.stdout
