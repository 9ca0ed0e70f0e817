"""--strict-readiness: /v2/health/ready (REST and gRPC) says ready only while every model the
repository or --load-model names is READY; the repository API's unload and load move that set."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as tgrpc

from ..conftest import MODEL_REPO, RunningServer, start_server


def versionless_copy(repo: Path, name: str) -> None:
    """A model whose load fails: simple's config without a version directory."""
    (repo / name).mkdir()
    text = (MODEL_REPO / "simple" / "config.pbtxt").read_text().replace('name: "simple"', f'name: "{name}"')
    (repo / name / "config.pbtxt").write_text(text)


def wait_started(server: RunningServer, timeout: float = 60) -> None:
    """Started means the ready line is logged (readiness itself is what is under test)."""
    deadline = time.monotonic() + timeout
    while "ferry ready:" not in server.log() and "ferry started" not in server.log():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.1)


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("strict") / "models"
    repo.mkdir()
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    versionless_copy(repo, "broken")
    args = ["--model-control-mode", "explicit", "--load-model", "simple", "--load-model", "broken"]
    server = start_server(
        repo, repo.parent / "server.log", *args, "--strict-readiness", wait_ready=False, env={"FERRY_HTTP_PROT": "1"}
    )
    wait_started(server)
    yield server
    server.stop()


def readiness(server: RunningServer) -> tuple[int, bool]:
    response = httpx.get(f"http://{server.http_url}/v2/health/ready", timeout=10)
    grpc_ready = tgrpc.InferenceServerClient(server.grpc_url).is_server_ready()
    assert response.json()["ready"] is grpc_ready
    return response.status_code, grpc_ready


def test_a_broken_model_keeps_the_server_unready(strict_server: RunningServer) -> None:
    assert readiness(strict_server) == (503, False)
    body = httpx.get(f"http://{strict_server.http_url}/v2/health/ready", timeout=10).json()
    assert body["models_not_ready"] == ["broken"], body  # which model holds readiness back
    assert "ferry ready" not in strict_server.log()  # the log says so too
    assert "ferry started, not ready: 1 model not READY (broken)" in strict_server.log()
    with httpx.Client(base_url=f"http://{strict_server.http_url}", timeout=30) as client:
        assert client.get("/v2/models/simple/ready").status_code == 200  # the working model serves
        assert client.post("/v2/repository/models/broken/unload", json={}).status_code == 200
        assert readiness(strict_server) == (200, True)  # unloaded on purpose: no longer named
        assert client.post("/v2/repository/models/broken/load", json={}).status_code >= 400
        assert readiness(strict_server) == (503, False)  # asked for again and failed
        assert client.post("/v2/repository/models/broken/unload", json={}).status_code == 200
        assert client.post("/v2/repository/models/simple/unload", json={}).status_code == 200
        assert readiness(strict_server) == (200, True)
        assert client.post("/v2/repository/models/simple/load", json={}).status_code == 200
        assert readiness(strict_server) == (200, True)


def test_a_mistyped_variable_is_named_at_start(strict_server: RunningServer) -> None:
    assert "FERRY_HTTP_PROT is not a Ferry option and is ignored; did you mean FERRY_HTTP_PORT?" in strict_server.log()


def test_without_the_option_readiness_ignores_models(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    repo.mkdir()
    versionless_copy(repo, "broken")
    server = start_server(repo, tmp_path / "server.log")  # waits for 200 from /v2/health/ready
    try:
        assert readiness(server) == (200, True)
        wait_started(server)
        assert "ferry ready" not in server.log()  # nothing is READY: the log does not pretend
        assert "ferry started, not ready: 1 model not READY (broken)" in server.log()
    finally:
        server.stop()
