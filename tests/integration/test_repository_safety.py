"""Nothing leaves the repository and nothing in it is executed.

A hostile repository (pickles, Python files, symlinks and external data pointing outside) and a
hostile API caller (path-like model names, config overrides naming outside files, ``file:``
uploads) are tried on a real server over REST and gRPC.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import MODEL_REPO, Payload, RunningServer, start_server

# No 'name': the same config serves under an alias (Triton refuses a name that differs from the directory)
SIMPLE_CONFIG = (MODEL_REPO / "simple" / "config.pbtxt").read_text().replace('name: "simple"\n', "")
MARKER_CODE = "import pathlib; pathlib.Path({marker!r}).write_text('executed')\n"


def external_data_model(location: str) -> bytes:
    """An ONNX model whose only weight lives in an external file at ``location``."""
    weight = TensorProto(name="W", data_type=TensorProto.UINT8, dims=[16], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["Y"])],
        "leak",
        [],
        [helper.make_tensor_value_info("Y", TensorProto.UINT8, [16])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


def build_hostile_repository(root: Path) -> tuple[Path, Path, list[Path]]:
    """The repository, the outside directory, and the markers that must never appear."""
    repo, outside = root / "models", root / "outside"
    repo.mkdir()
    outside.mkdir()
    markers = [root / f"marker-{i}" for i in range(9)]
    (outside / "secret.txt").write_text("top secret\n")
    (outside / "secret.bin").write_bytes(b"0123456789abcdef")
    shutil.copytree(MODEL_REPO / "simple", outside / "simple_copy")
    shutil.copy(MODEL_REPO / "simple" / "1" / "model.onnx", outside / "model.onnx")
    (outside / "config.pbtxt").write_text(SIMPLE_CONFIG)

    simple = repo / "simple"
    shutil.copytree(MODEL_REPO / "simple", simple)
    (simple / "config.pbtxt").write_text(SIMPLE_CONFIG)
    # Python files where a careless server might import them, and pickles where it might load them.
    (repo / "__init__.py").write_text(MARKER_CODE.format(marker=str(markers[0])))
    (repo / "sitecustomize.py").write_text(MARKER_CODE.format(marker=str(markers[1])))
    (simple / "__init__.py").write_text(MARKER_CODE.format(marker=str(markers[2])))
    (simple / "1" / "model.py").write_text(MARKER_CODE.format(marker=str(markers[3])))
    (simple / "labels.pkl").write_bytes(pickle.dumps(Payload(markers[4])))

    python_model = repo / "python_backend"  # Triton's Python backend: Ferry must refuse, not run it
    (python_model / "1").mkdir(parents=True)
    (python_model / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 0\n')
    (python_model / "1" / "model.py").write_text(MARKER_CODE.format(marker=str(markers[5])))

    torch_model = repo / "torch_pickle"  # a PyTorch checkpoint is a pickle
    (torch_model / "1").mkdir(parents=True)
    (torch_model / "config.pbtxt").write_text('platform: "pytorch_libtorch"\n')
    (torch_model / "1" / "model.pt").write_bytes(pickle.dumps(Payload(markers[6])))
    torch_archive = repo / "torch_save_archive"  # a TorchScript-shaped zip whose pickles call os.mkdir
    (torch_archive / "1").mkdir(parents=True)
    (torch_archive / "config.pbtxt").write_text('backend: "pytorch"\n')
    with zipfile.ZipFile(torch_archive / "1" / "model.pt", "w") as archive:
        for name in ("constants.pkl", "data.pkl"):
            archive.writestr(f"archive/{name}", pickle.dumps(Payload(markers[8]), protocol=2))
        archive.writestr("archive/version", "3\n")

    disguised = repo / "pickle_as_onnx"
    (disguised / "1").mkdir(parents=True)
    (disguised / "1" / "model.onnx").write_bytes(pickle.dumps(Payload(markers[7])))

    leak = repo / "external_leak"  # ONNX external data pointing out of the model directory
    (leak / "1").mkdir(parents=True)
    (leak / "1" / "model.onnx").write_bytes(external_data_model("../../../outside/secret.bin"))

    (repo / "alias").symlink_to("simple", target_is_directory=True)  # inside: allowed
    (repo / "escape").symlink_to(outside / "simple_copy", target_is_directory=True)  # outside: refused
    linked_config = repo / "linked_config"
    shutil.copytree(MODEL_REPO / "simple", linked_config)
    (linked_config / "config.pbtxt").unlink()
    (linked_config / "config.pbtxt").symlink_to(outside / "config.pbtxt")
    linked_model = repo / "linked_model"
    shutil.copytree(MODEL_REPO / "simple", linked_model)
    (linked_model / "config.pbtxt").write_text(SIMPLE_CONFIG)
    (linked_model / "1" / "model.onnx").unlink()
    (linked_model / "1" / "model.onnx").symlink_to(outside / "model.onnx")
    return repo, outside, markers


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path, list[Path]]]:
    root = tmp_path_factory.mktemp("hostile")
    repo, outside, markers = build_hostile_repository(root)
    running = start_server(repo, root / "server.log", "--model-control-mode", "explicit", "--load-model", "*")
    yield running, outside, markers
    running.stop()


@pytest.fixture(scope="module")
def stub(hostile) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(hostile[0].grpc_url) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def index(server: RunningServer) -> dict[str, dict]:
    rows = httpx.post(f"http://{server.http_url}/v2/repository/index", timeout=10).json()
    return {row["name"]: row for row in rows}


def assert_simple_serves(server: RunningServer, model: str = "simple") -> None:
    a = np.arange(16, dtype=np.int32).tolist()
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": a},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": a},
        ]
    }
    response = httpx.post(f"http://{server.http_url}/v2/models/{model}/infer", json=body, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [2 * x for x in a]


def test_nothing_in_the_repository_is_unpickled_or_executed(hostile) -> None:
    server, _, markers = hostile
    rows = index(server)
    assert rows["simple"]["state"] == "READY" and rows["alias"]["state"] == "READY"
    assert "--allow-python-models" in rows["python_backend"]["reason"]  # refused: code is not run by default
    for name in ("torch_pickle", "torch_save_archive"):  # torch.jit.load's restricted unpickler refuses both
        assert re.search(
            r"torch\.jit\.load cannot load .* as TorchScript|pytorch_libtorch' needs torch", rows[name]["reason"]
        ), rows[name]
    assert "onnxruntime cannot load" in rows["pickle_as_onnx"]["reason"]
    assert rows["external_leak"]["state"] == "UNAVAILABLE"
    assert "escapes model directory" in rows["external_leak"]["reason"]
    assert_simple_serves(server)
    assert_simple_serves(server, "alias")
    assert [m.name for m in markers if m.exists()] == []
    assert "Traceback" not in server.log()


def test_symlinks_out_of_the_repository_are_refused(hostile) -> None:
    server, outside, _ = hostile
    rows = index(server)
    for name in ("escape", "linked_config", "linked_model"):
        assert rows[name]["state"] == "UNAVAILABLE", rows[name]
        assert "resolves outside" in rows[name]["reason"], rows[name]
        assert str(outside) not in rows[name]["reason"] and str(server.repository) not in rows[name]["reason"]
    response = httpx.post(f"http://{server.http_url}/v2/repository/models/escape/load", timeout=10)
    assert response.status_code == 400 and "resolves outside" in response.json()["error"]


@pytest.mark.parametrize(
    "name",
    ["..", "../simple", "simple/../simple", ".hidden", "/etc", "a\\b", "sim\x00ple", "", "../../outside/simple_copy"],
)
def test_path_like_model_names_are_rejected_over_grpc(stub, hostile, name: str) -> None:
    for call, request in (
        (stub.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name=name)),
        (stub.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name=name)),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            call(request, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
        assert "invalid model name" in caught.value.details()
    assert_simple_serves(hostile[0])


@pytest.mark.parametrize(
    "path, status",
    [
        ("%2e%2e", 400),
        ("..%5csimple", 400),
        (".hidden", 400),
        ("sim%00ple", 400),
        ("..%2fsimple", 404),
        ("%2e%2e%2f%2e%2e%2foutside%2fsimple_copy", 404),  # '/' never reaches a name
    ],
)
def test_path_like_model_names_are_rejected_over_rest(hostile, path: str, status: int) -> None:
    server = hostile[0]
    for action in ("load", "unload"):
        response = httpx.post(f"http://{server.http_url}/v2/repository/models/{path}/{action}", timeout=10)
        assert response.status_code == status, (path, response.text)
    assert_simple_serves(server)


def config_json(**changes) -> str:
    config = {
        "name": "simple",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 8,
        "input": [{"name": f"INPUT{i}", "data_type": "TYPE_INT32", "dims": [16]} for i in range(2)],
        "output": [{"name": f"OUTPUT{i}", "data_type": "TYPE_INT32", "dims": [16]} for i in range(2)],
    }
    config.update(changes)
    return json.dumps(config)


def hostile_configs(outside: Path) -> list[tuple[str, str]]:
    """Config overrides that try to make the server read a file outside the model directory."""
    labelled = json.loads(config_json())
    labelled["output"][0]["label_filename"] = "../../outside/secret.txt"
    warm = json.loads(config_json())
    warm["model_warmup"] = [
        {
            "name": "w",
            "batch_size": 1,
            "inputs": {
                name: {"data_type": "TYPE_INT32", "dims": [16], "input_data_file": "../../../outside/secret.bin"}
                for name in ("INPUT0", "INPUT1")
            },
        }
    ]
    return [
        (config_json(default_model_filename="../../../outside/model.onnx"), "outside"),
        (config_json(default_model_filename=str(outside / "model.onnx")), "not an absolute path"),
        (json.dumps(labelled), "outside"),
        (json.dumps(warm), "outside"),
    ]


def test_load_api_config_cannot_name_files_outside_the_model(hostile, stub) -> None:
    server, outside, _ = hostile
    for config, fragment in hostile_configs(outside):
        response = httpx.post(
            f"http://{server.http_url}/v2/repository/models/simple/load",
            json={"parameters": {"config": config}},
            timeout=30,
        )
        assert response.status_code == 400, response.text
        assert fragment in response.json()["error"]
        request = pb.RepositoryModelLoadRequest(model_name="simple")
        request.parameters["config"].string_param = config
        with pytest.raises(grpc.RpcError) as caught:
            stub.RepositoryModelLoad(request, timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in caught.value.details()
        assert_simple_serves(server)  # the loaded version keeps serving after a refused reload
    assert "top secret" not in server.log()


def test_file_uploads_through_the_load_api_are_refused(hostile, stub) -> None:
    server = hostile[0]
    model_bytes = (MODEL_REPO / "simple" / "1" / "model.onnx").read_bytes()
    response = httpx.post(
        f"http://{server.http_url}/v2/repository/models/simple/load",
        timeout=10,
        json={"parameters": {"config": config_json(), "file:1/model.onnx": "AAAA"}},
    )
    assert response.status_code == 400 and "not supported" in response.json()["error"]
    request = pb.RepositoryModelLoadRequest(model_name="simple")
    request.parameters["file:1/model.onnx"].bytes_param = model_bytes
    with pytest.raises(grpc.RpcError) as caught:
        stub.RepositoryModelLoad(request, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert_simple_serves(server)


def test_external_data_inside_the_model_directory_still_works(tmp_path: Path) -> None:
    """The refusal above is about leaving the directory, not about external data as such."""
    import onnxruntime as ort

    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "weights.bin").write_bytes(b"inside-the-model")
    (tmp_path / "1" / "model.onnx").write_bytes(external_data_model("weights.bin"))
    onnx.checker.check_model(str(tmp_path / "1" / "model.onnx"))
    session = ort.InferenceSession(str(tmp_path / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert bytes(session.run(None, {})[0]) == b"inside-the-model"


def _threads(server: RunningServer) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE).group(1))


def test_thread_counts_from_the_load_api_are_bounded_by_the_cores(hostile) -> None:
    """A load API override asking for 1,000 intra- and inter-op threads (a 40-second reload that
    starved every client) loads promptly with at most the usable cores, and says so in the log."""
    server = hostile[0]
    config = {
        "max_batch_size": 8,
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        "parameters": {
            "intra_op_thread_count": {"string_value": "1000"},
            "inter_op_thread_count": {"string_value": "1000"},
        },
    }
    before = _threads(server)
    body = {"parameters": {"config": json.dumps(config)}}
    response = httpx.post(f"http://{server.http_url}/v2/repository/models/simple/load", json=body, timeout=120)
    assert response.status_code == 200, response.text
    grown = _threads(server) - before
    cores = len(os.sched_getaffinity(server.process.pid))
    assert grown <= 2 * cores + 8, (grown, cores)
    assert re.search(r"parameter intra_op_thread_count 1000 exceeds the \d+ usable cores", server.log())
    assert_simple_serves(server)
    for bad in ("many", "-3"):
        config["parameters"]["intra_op_thread_count"]["string_value"] = bad
        body = {"parameters": {"config": json.dumps(config)}}
        refused = httpx.post(f"http://{server.http_url}/v2/repository/models/simple/load", json=body, timeout=120)
        assert refused.status_code == 400 and "intra_op_thread_count" in refused.text, refused.text
    assert_simple_serves(server)


def test_an_unreadable_repository_is_unavailable_without_its_path(hostile, stub) -> None:
    """The repository directory goes away under a running server: the index and the dashboard
    answer 503 / UNAVAILABLE with the reason but not the server's path; loaded models keep serving."""
    server = hostile[0]
    moved = server.repository.with_name("moved-away")
    server.repository.rename(moved)
    try:
        for method, path in (("POST", "/v2/repository/index"), ("GET", "/dashboard/api/models")):
            answer = httpx.request(method, f"http://{server.http_url}{path}", timeout=30)
            assert answer.status_code == 503, (path, answer.status_code, answer.text)
            assert "the model repository cannot be read" in answer.text
            assert str(server.repository) not in answer.text and str(server.repository.parent) not in answer.text
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert str(server.repository.parent) not in info.value.details()
        assert_simple_serves(server)
    finally:
        moved.rename(server.repository)
    assert "simple" in index(server)
