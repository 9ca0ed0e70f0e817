"""Hostile clients whose outcome depended on the process mode (issue 24), against a real server in
one process and with two intake processes, auth on with two tokens: system shared memory (the
model process reads it) and headers the intake relays. Each test carries out the attack (truncates
the object, plants the link, registers as two tokens, fills the caps, sends the header) and checks
the clean answer and that the server, and every other client, is still served."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import MODEL_REPO, RunningServer, start_server

SHM = Path("/dev/shm")
TOKEN_A, TOKEN_B = "token-of-client-a", "token-of-client-b"
PER_CLIENT, TOTAL = 4, 6
SIZE = 64  # one [1, 16] INT32 tensor


@pytest.fixture(scope="module", params=["one process", "intake processes"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_shm") / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    running = start_server(
        repo,
        repo.parent / "server.log",
        *("--allow-shared-memory", "--intake-processes", "2" if request.param == "intake processes" else "1"),
        *("--shared-memory-max-regions", str(TOTAL), "--shared-memory-max-regions-per-client", str(PER_CLIENT)),
        env={"FERRY_AUTH_TOKENS": f"{TOKEN_A},{TOKEN_B}"},
        probe_headers={"Authorization": f"Bearer {TOKEN_A}"},
    )
    yield running
    for key in [key for key in _CLIENTS if key[0] == running.http_port]:
        _CLIENTS.pop(key).close()
    running.stop()


class Objects:
    """/dev/shm objects made for one test, removed after it (whatever the test left registered)."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def make(self, size: int, data: bytes = b"") -> str:
        name = f"ferry_hostile_{uuid.uuid4().hex[:12]}"
        path = SHM / name
        path.write_bytes(data.ljust(size, b"\0"))
        self.paths.append(path)
        return name

    def remove(self) -> None:
        for path in self.paths:
            path.unlink(missing_ok=True)


@pytest.fixture
def objects(server: RunningServer) -> Iterator[Objects]:
    made = Objects()
    yield made
    for token in (TOKEN_A, TOKEN_B):
        _rest(server, token).post("/v2/systemsharedmemory/unregister")
    made.remove()


_CLIENTS: dict[tuple[int, str], httpx.Client] = {}  # one keep-alive client per server and token


def _rest(server: RunningServer, token: str) -> httpx.Client:
    key = (server.http_port, token)
    if key not in _CLIENTS:
        _CLIENTS[key] = httpx.Client(
            base_url=f"http://{server.http_url}", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
    return _CLIENTS[key]


def _register(server: RunningServer, token: str, name: str, key: str, byte_size: int = SIZE) -> httpx.Response:
    return _rest(server, token).post(
        f"/v2/systemsharedmemory/region/{name}/register", json={"key": key, "offset": 0, "byte_size": byte_size}
    )


def _infer_body(region: str, output_region: str | None = None) -> dict:
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
    return body


def _grpc_infer(server: RunningServer, token: str, region: str) -> pb.ModelInferResponse:
    request = pb.ModelInferRequest(model_name="simple")
    first = request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    first.parameters["shared_memory_region"].string_param = region
    first.parameters["shared_memory_byte_size"].int64_param = SIZE
    request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    request.raw_input_contents.append(np.ones(16, np.int32).tobytes())
    with grpc.insecure_channel(server.grpc_url) as channel:
        return pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            request, metadata=[("authorization", f"Bearer {token}")], timeout=30
        )


def _grpc_stub_call(server: RunningServer, token: str, method: str, request) -> object:
    with grpc.insecure_channel(server.grpc_url) as channel:
        return getattr(pb_grpc.GRPCInferenceServiceStub(channel), method)(
            request, metadata=[("authorization", f"Bearer {token}")], timeout=30
        )


def _others_are_served(server: RunningServer) -> None:
    """The process is alive and an ordinary client still gets its answer, over both protocols."""
    assert server.process.poll() is None, server.log()[-3000:]
    body = {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))} for n in ("INPUT0", "INPUT1")
        ]
    }
    answer = _rest(server, TOKEN_B).post("/v2/models/simple/infer", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == [2 * i for i in range(16)]
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    response = _grpc_stub_call(server, TOKEN_B, "ModelInfer", request)
    assert np.frombuffer(response.raw_output_contents[0], np.int32).tolist() == [2 * i for i in range(16)]


def test_a_truncated_object_is_a_clear_error_not_a_crash(server: RunningServer, objects: Objects) -> None:
    """Register 1 MiB, read from it, ``truncate -s 0`` it: reads and writes answer 400 /
    INVALID_ARGUMENT (the mapped server used to die of SIGBUS here), and the server keeps serving."""
    name = objects.make(1 << 20, np.arange(16, dtype=np.int32).tobytes())
    assert _register(server, TOKEN_A, "big", f"/{name}", 1 << 20).status_code == 200
    client = _rest(server, TOKEN_A)
    before = client.post("/v2/models/simple/infer", json=_infer_body("big"))
    assert before.status_code == 200, before.text
    assert before.json()["outputs"][0]["data"] == [i + 1 for i in range(16)]
    whole = _infer_body("big")
    whole["inputs"][0]["parameters"]["shared_memory_byte_size"] = 1 << 20  # refused before 1 MiB is copied
    refused = client.post("/v2/models/simple/infer", json=whole)
    assert (
        refused.status_code == 400
        and "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 1048576" in refused.text
    ), refused.text

    os.truncate(SHM / name, 0)
    for body in (_infer_body("big"), _infer_body("big", output_region="big")):
        refused = client.post("/v2/models/simple/infer", json=body)
        assert refused.status_code == 400, refused.text
        assert "has been shrunk" in refused.json()["error"]
    with pytest.raises(grpc.RpcError) as info:
        _grpc_infer(server, TOKEN_A, "big")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "has been shrunk" in info.value.details()
    _others_are_served(server)


def test_symlinks_and_other_users_objects_are_never_opened(server: RunningServer, objects: Objects, tmp_path) -> None:
    """A link planted in /dev/shm towards a root-only file, and another user's object: both refused,
    neither read nor written."""
    secret = tmp_path / "root-only"
    secret.write_bytes(b"secret" * 20)
    secret.chmod(0o600)
    link = SHM / f"ferry_hostile_link_{uuid.uuid4().hex[:8]}"
    link.symlink_to(secret)
    objects.paths.append(link)
    refused = _register(server, TOKEN_A, "link", f"/{link.name}")
    assert refused.status_code == 400, refused.text
    assert "symbolic link" in refused.json()["error"]

    foreign = objects.make(SIZE)
    os.chown(SHM / foreign, 65534, 65534)  # nobody's object; the server runs as this test's user
    refused = _register(server, TOKEN_A, "foreign", f"/{foreign}")
    assert refused.status_code == 400, refused.text
    assert "owned by a user this server does not accept" in refused.json()["error"]

    directory = SHM / f"ferry_hostile_dir_{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    try:
        assert _register(server, TOKEN_A, "dir", f"/{directory.name}").status_code == 400
    finally:
        directory.rmdir()
    assert _rest(server, TOKEN_A).get("/v2/systemsharedmemory/status").json() == []
    assert secret.read_bytes() == b"secret" * 20 and stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_regions_belong_to_the_token_that_registered_them(server: RunningServer, objects: Objects) -> None:
    """Token B neither lists, reads, writes nor unregisters token A's region."""
    name = objects.make(SIZE, np.full(16, 7, np.int32).tobytes())
    assert _register(server, TOKEN_A, "mine", f"/{name}").status_code == 200
    a, b = _rest(server, TOKEN_A), _rest(server, TOKEN_B)

    assert b.get("/v2/systemsharedmemory/status").json() == []
    assert b.get("/v2/systemsharedmemory/region/mine/status").status_code == 404
    with pytest.raises(grpc.RpcError) as info:
        _grpc_stub_call(server, TOKEN_B, "SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(name="mine"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    for body in (_infer_body("mine"), _infer_body("other", output_region="mine")):
        used = b.post("/v2/models/simple/infer", json=body)
        assert used.status_code == 400 and "Unable to find shared memory region: '" in used.text, used.text
    with pytest.raises(grpc.RpcError) as info:
        _grpc_infer(server, TOKEN_B, "mine")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Unregistering an unknown name succeeds (as in Triton); A's region is unknown to B, so stays.
    assert b.post("/v2/systemsharedmemory/region/mine/unregister").status_code == 200
    assert b.post("/v2/systemsharedmemory/unregister").status_code == 200
    _grpc_stub_call(server, TOKEN_B, "SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest())

    assert [row["name"] for row in a.get("/v2/systemsharedmemory/status").json()] == ["mine"]
    answer = a.post("/v2/models/simple/infer", json=_infer_body("mine"))
    assert answer.status_code == 200 and answer.json()["outputs"][0]["data"] == [8] * 16, answer.text
    assert np.frombuffer(_grpc_infer(server, TOKEN_A, "mine").raw_output_contents[0], np.int32).tolist() == [8] * 16


def test_registrations_are_capped_per_token_and_in_total(server: RunningServer, objects: Objects) -> None:
    """Registering until refused: 429 / RESOURCE_EXHAUSTED per token, then server-wide; the
    refusals hold no descriptor, and unregistering makes room again."""
    name = objects.make(SIZE)
    fds_before = len(os.listdir(f"/proc/{server.process.pid}/fd"))
    for index in range(PER_CLIENT):
        assert _register(server, TOKEN_A, f"a{index}", f"/{name}").status_code == 200
    for _ in range(5):
        refused = _register(server, TOKEN_A, "one-too-many", f"/{name}")
        assert refused.status_code == 429, refused.text
    assert "--shared-memory-max-regions-per-client" in refused.json()["error"]
    for index in range(TOTAL - PER_CLIENT):
        assert _register(server, TOKEN_B, f"b{index}", f"/{name}").status_code == 200
    with pytest.raises(grpc.RpcError) as info:
        request = pb.SystemSharedMemoryRegisterRequest(name="b-last", key=f"/{name}", byte_size=SIZE)
        _grpc_stub_call(server, TOKEN_B, "SystemSharedMemoryRegister", request)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--shared-memory-max-regions" in info.value.details()
    assert len(os.listdir(f"/proc/{server.process.pid}/fd")) <= fds_before + TOTAL + 2  # + a connection or two
    assert _rest(server, TOKEN_A).post("/v2/systemsharedmemory/region/a0/unregister").status_code == 200
    assert _register(server, TOKEN_B, "b-last", f"/{name}").status_code == 200
    _others_are_served(server)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("nul%00name", "/obj"),
        ("ok", "/o\u0000bj"),
        ("ok", "/" + "k" * 300),
        ("ok", "/space key"),
        ("n" * 300, "/obj"),
        ("line%0Abreak", "/obj"),
    ],
)
def test_bad_names_and_keys_are_invalid_arguments(server: RunningServer, name: str, key: str) -> None:
    refused = _register(server, TOKEN_A, name, key)
    assert refused.status_code == 400, refused.text
    assert "not valid" in refused.text or "invalid shm key" in refused.text


def test_a_nul_byte_over_grpc_is_an_invalid_argument(server: RunningServer) -> None:
    for name, key in (("nul\0name", "/obj"), ("ok", "/o\0bj")):
        with pytest.raises(grpc.RpcError) as info:
            request = pb.SystemSharedMemoryRegisterRequest(name=name, key=key, byte_size=SIZE)
            _grpc_stub_call(server, TOKEN_A, "SystemSharedMemoryRegister", request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()


def test_header_values_with_trailing_white_space_are_relayed(server: RunningServer) -> None:
    """A header value ending in a space or tab (legal: optional white space) used to make every
    route the intake forwards answer 503; now each answers as with one process."""
    requests = [
        ("GET", "/v2/health/ready", b""),
        ("GET", "/v2/models/simple", b""),
        ("POST", "/v2/repository/index", b""),
        ("GET", "/", b""),
    ]
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        reader = sock.makefile("rb")
        for method, path, body in requests:
            head = (
                f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN_A}\r\n"
                f"X-Trailing-Space: value \r\nX-Trailing-Tab: value\t\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            sock.sendall(head.encode() + body)
            status = int(reader.readline().split()[1])
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            assert status == 200, (path, status)
    assert "cannot forward" not in server.log()
