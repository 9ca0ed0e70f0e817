"""System shared memory with intake processes (issue 39): the intake that receives a request opens
the client's object once and reads the inputs from it into the request's arena block, and writes
the outputs into their regions, so the model process (the one serial core) sees a plain request.
Registration stays the model process's: a region registered again under its name is read anew, an
unregistered one is refused, a shrunk one is a clear error."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from ..conftest import MODEL_REPO, RunningServer, start_server

SHM = Path("/dev/shm")
SIZE = 64  # one [1, 16] INT32 tensor of the "simple" model
INTAKES = 2
#: New connections land on an intake the kernel picks: enough of them reach every intake.
MOST_CONNECTIONS = 200


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("shm_intakes") / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    running = start_server(
        repo, repo.parent / "server.log", "--allow-shared-memory", "--intake-processes", str(INTAKES)
    )
    yield running
    running.stop()


@pytest.fixture
def objects(server: RunningServer) -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    httpx.post(f"http://{server.http_url}/v2/systemsharedmemory/unregister")
    for path in made:
        path.unlink(missing_ok=True)


def _object(made: list[Path], values: np.ndarray) -> str:
    path = SHM / f"ferry_intakes_{uuid.uuid4().hex[:12]}"
    path.write_bytes(values.astype(np.int32).tobytes().ljust(SIZE, b"\0"))
    made.append(path)
    return path.name


def _register(server: RunningServer, region: str, name: str) -> None:
    answer = httpx.post(
        f"http://{server.http_url}/v2/systemsharedmemory/region/{region}/register",
        json={"key": f"/{name}", "offset": 0, "byte_size": SIZE},
    )
    assert answer.status_code == 200, answer.text


def _infer(server: RunningServer, region: str, output_region: str | None = None) -> httpx.Response:
    """One request on a new connection (so on an intake the kernel picks)."""
    shm = {"shared_memory_region": region, "shared_memory_byte_size": SIZE}
    body: dict = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": shm},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
    if output_region is not None:
        out = {"shared_memory_region": output_region, "shared_memory_byte_size": SIZE}
        body["outputs"] = [{"name": "OUTPUT0", "parameters": out}]
    return httpx.post(f"http://{server.http_url}/v2/models/simple/infer", json=body)


def _intakes(server: RunningServer) -> list[psutil.Process]:
    intakes = psutil.Process(server.process.pid).children()
    assert len(intakes) == INTAKES
    return intakes


def _opened(process: psutil.Process, name: str) -> int:
    """How many descriptors of ``process`` name the object ``name``."""
    return sum(1 for f in process.open_files() if f.path == str(SHM / name))


def _until_every_intake_served(server: RunningServer, region: str, name: str, expected: list[int]) -> None:
    """Requests on new connections until each intake has opened the object (each answer checked)."""
    for _ in range(MOST_CONNECTIONS):
        answer = _infer(server, region)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == expected
        if all(_opened(intake, name) for intake in _intakes(server)):
            return
    raise AssertionError(f"{MOST_CONNECTIONS} connections did not reach every intake")


def _until_no_intake_holds(server: RunningServer, name: str) -> None:
    """Until every intake has closed the object (each polled with a ready probe in between)."""
    for _ in range(MOST_CONNECTIONS):
        if not any(_opened(intake, name) for intake in _intakes(server)):
            return
        assert httpx.get(f"http://{server.http_url}/v2/health/ready").status_code == 200
    raise AssertionError(f"an intake still holds {name} open after the region was unregistered")


def test_intakes_open_each_region_once_and_serve_it(server: RunningServer, objects: list[Path]) -> None:
    """Every intake ends up holding the input and output objects open, once each, however many
    requests it served through them; the outputs land in their region."""
    source = _object(objects, np.arange(16))
    target = _object(objects, np.zeros(16))
    _register(server, "in", source)
    _register(server, "out", target)
    _until_every_intake_served(server, "in", source, [i + 1 for i in range(16)])
    for _ in range(2 * INTAKES):
        answer = _infer(server, "in", output_region="out")
        assert answer.status_code == 200, answer.text
        assert "data" not in answer.json()["outputs"][0]  # REST describes an output in shared memory only
        assert np.frombuffer((SHM / target).read_bytes(), np.int32).tolist() == [i + 1 for i in range(16)]
    assert [_opened(intake, source) for intake in _intakes(server)] == [1] * INTAKES
    assert sum(_opened(intake, target) for intake in _intakes(server)) >= 1
    assert all(_opened(intake, target) <= 1 for intake in _intakes(server))


def test_a_region_registered_again_unregistered_or_shrunk(server: RunningServer, objects: list[Path]) -> None:
    """After every intake mirrored region 'r': registered again on another object, 'r' is read from
    that one; unregistered, it is unknown; shrunk, a clear 400; the intakes keep serving."""
    first = _object(objects, np.full(16, 1))
    _register(server, "r", first)
    _until_every_intake_served(server, "r", first, [2] * 16)
    assert httpx.post(f"http://{server.http_url}/v2/systemsharedmemory/region/r/unregister").status_code == 200
    _until_no_intake_holds(server, first)  # the model process told them
    second = _object(objects, np.full(16, 7))
    _register(server, "r", second)
    _until_every_intake_served(server, "r", second, [8] * 16)

    os.truncate(SHM / second, 0)
    for _ in range(2 * INTAKES):
        refused = _infer(server, "r")
        assert refused.status_code == 400 and "has been shrunk" in refused.json()["error"], refused.text
    assert httpx.post(f"http://{server.http_url}/v2/systemsharedmemory/region/r/unregister").status_code == 200
    for _ in range(2 * INTAKES):
        refused = _infer(server, "r")
        assert refused.status_code == 400, refused.text
        assert "Unable to find shared memory region: 'r'" in refused.json()["error"]
    assert [intake.is_running() for intake in _intakes(server)] == [True] * INTAKES
