"""Unregistering system shared memory regions while requests use them, in the situation of
Triton's ``L0_shared_memory`` unregister-during-inference tests: a second client unregisters
every region while a request that reads its input from one and writes its output to another is
held in the model (a gated Python model, so the overlap is certain, not timed). As in Triton the
regions stay listed and usable until their last request ends, then they are gone without another
unregister; with auth off every client is one identity, so this is also one client's
unregister-all meeting another client's requests."""

from __future__ import annotations

import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

from ..conftest import RunningServer, start_server
from .triton_helpers import Triton, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GATED = Path(__file__).parent / "python_models" / "gated"
VALUE = 4  # one INT32 element: the gated model's X and BATCH are [1, 1]


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate")


@pytest.fixture(scope="module")
def server(gate: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("shm_in_use") / "models"
    shutil.copytree(GATED, repo / "gated", ignore=shutil.ignore_patterns("__pycache__"))
    with open(repo / "gated" / "config.pbtxt", "a") as config:
        config.write(f'parameters {{ key: "GATE_DIR" value {{ string_value: "{gate}" }} }}\n')
    running = start_server(repo, repo.parent / "server.log", "--allow-python-models", "--allow-shared-memory")
    yield running
    running.stop()


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _pending(server: RunningServer) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    match = re.search(r'nv_inference_pending_request_count{model="gated",version="1"} (\S+)', text)
    return float(match.group(1)) if match else -1.0


def _listed(server: RunningServer) -> set[str]:
    """The regions the status lists, asked by another client (REST)."""
    rows = httpx.get(f"http://{server.http_url}/v2/systemsharedmemory/status", timeout=10).json()
    return {row["name"] for row in rows}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unregister_all_waits_for_the_requests_using_the_regions(
    server: RunningServer, gate: Path, protocol: str
) -> None:
    for name in ("entered", "release"):
        (gate / name).unlink(missing_ok=True)
    prefix = f"inuse_{uuid.uuid4().hex[:8]}"
    names = (f"{prefix}_in", f"{prefix}_out")
    handles = [shm.create_shared_memory_region(name, f"/{name}", VALUE) for name in names]
    shm.set_shared_memory_region(handles[0], [np.array([[-1]], dtype=np.int32)])  # -1: held at the gate
    registrar = connect(protocol, server)
    for name in names:
        registrar.client.register_system_shared_memory(name, f"/{name}", VALUE)

    def infer() -> np.ndarray:
        triton: Triton = connect(protocol, server)  # each request its own client
        x = triton.module.InferInput("X", [1, 1], "INT32")
        x.set_shared_memory(names[0], VALUE)
        out = triton.module.InferRequestedOutput("BATCH")
        out.set_shared_memory(names[1], VALUE)
        triton.client.infer("gated", [x], outputs=[out])
        return shm.get_contents_as_numpy(handles[1], np.int32, [1, 1])

    pool = ThreadPoolExecutor(2)
    try:
        first = pool.submit(infer)
        _wait_for(lambda: (gate / "entered").exists(), "the request to be held in the model")
        httpx.post(f"http://{server.http_url}/v2/systemsharedmemory/unregister", timeout=10).raise_for_status()
        assert _listed(server) == set(names)  # in use: still there, as in Triton
        second = pool.submit(infer)  # placed after the unregister, while the first is held: it may use them
        _wait_for(lambda: _pending(server) == 2, "the second request to queue behind the held one")
        (gate / "release").write_text("1")
        assert first.result(timeout=60)[0, 0] >= 1
        assert second.result(timeout=60)[0, 0] >= 1
        assert _listed(server) == set()  # gone with their last request, without another unregister
    finally:
        (gate / "release").write_text("1")
        pool.shutdown(wait=True)
        for handle in handles:
            shm.destroy_shared_memory_region(handle)
