"""Model control modes and broken models, against real servers (one shared by the tests that only read it)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as thttp

from ..conftest import MODEL_REPO, RunningServer, start_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def simple_request(client: thttp.InferenceServerClient, model: str = "simple", version: str = ""):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = thttp.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(a)
        inputs.append(tensor)
    return client.infer(model, inputs, model_version=version)


def index_by_name(client) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for row in client.get_model_repository_index():
        rows.setdefault(row["name"], []).append(row)
    return rows


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(MODEL_REPO / "simple", root / "simple")
    return root


@pytest.fixture(scope="module")
def mixed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server (the default mode: every model loaded at start) for the tests that only read it:
    ``simple``, three broken models, and ``bare``, a model without config.pbtxt. It must still stop
    cleanly (exit 0) at the end of the module."""
    repo = tmp_path_factory.mktemp("mixed") / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    corrupt = repo / "corrupt_onnx"
    shutil.copytree(MODEL_REPO / "simple", corrupt)
    (corrupt / "config.pbtxt").write_text((corrupt / "config.pbtxt").read_text().replace('"simple"', '"corrupt_onnx"'))
    (corrupt / "1" / "model.onnx").write_bytes(b"\x08\x07garbage that is not a protobuf" * 10)
    typo = repo / "typo_config"
    shutil.copytree(MODEL_REPO / "simple", typo)
    (typo / "config.pbtxt").write_text('name: "typo_config"\nplatform: "onnxruntime_onnx"\nmax_batch_szie: 8\n')
    mismatch = repo / "wrong_dims"
    shutil.copytree(MODEL_REPO / "simple", mismatch)
    text = (mismatch / "config.pbtxt").read_text().replace('"simple"', '"wrong_dims"')
    (mismatch / "config.pbtxt").write_text(text.replace("dims: [ 16 ]", "dims: [ 4, 4 ]", 1))
    bare = repo / "bare"
    (bare / "1").mkdir(parents=True)
    shutil.copy(MODEL_REPO / "simple" / "1" / "model.onnx", bare / "1" / "model.onnx")
    server = start_server(repo, repo.parent / "server.log")
    yield server
    assert server.stop() == 0, server.log()[-3000:]


def test_broken_models_do_not_take_down_the_others(mixed_server: RunningServer) -> None:
    client = thttp.InferenceServerClient(mixed_server.http_url)
    rows = index_by_name(client)
    assert rows["simple"][0]["state"] == "READY"
    assert rows["corrupt_onnx"][0]["state"] == "UNAVAILABLE"
    assert "onnxruntime cannot load" in rows["corrupt_onnx"][0]["reason"]
    assert "model.onnx" in rows["corrupt_onnx"][0]["reason"]
    reason = rows["typo_config"][0]["reason"]
    assert rows["typo_config"][0]["state"] == "UNAVAILABLE"
    assert "typo_config/config.pbtxt:3:1" in reason and 'no field named "max_batch_szie"' in reason
    assert str(mixed_server.repository) not in reason  # repository-relative: no server path
    reason = rows["wrong_dims"][0]["reason"]
    assert "input 'INPUT0' has dims [4, 4] in the config" in reason and "[?, 16]" in reason
    result = simple_request(client)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(16).reshape(1, 16) * 2)
    with pytest.raises(Exception, match="has no available versions") as info:
        simple_request(client, "corrupt_onnx")
    assert "onnxruntime cannot load" in str(info.value)


def test_config_autocomplete_without_config_file(mixed_server: RunningServer) -> None:
    client = thttp.InferenceServerClient(mixed_server.http_url)
    config = client.get_model_config("bare")
    assert config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_INT32", [16]),
        ("INPUT1", "TYPE_INT32", [16]),
    ]
    assert "dynamic_batching" in config
    result = simple_request(client, "bare")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16)))


def test_version_policy_and_explicit_mode(repo: Path, tmp_path: Path) -> None:
    shutil.copytree(repo / "simple" / "1", repo / "simple" / "2")
    shutil.copytree(repo / "simple" / "1", repo / "simple" / "3")
    config = repo / "simple" / "config.pbtxt"
    config.write_text(config.read_text() + "\nversion_policy: { specific: { versions: [1, 3] } }\n")
    server = start_server(repo, tmp_path / "server.log", "--model-control-mode", "explicit")
    try:
        client = thttp.InferenceServerClient(server.http_url)
        assert not client.is_model_ready("simple")  # explicit mode, nothing named at start
        client.load_model("simple")
        assert client.get_model_metadata("simple")["versions"] == ["1", "3"]
        assert simple_request(client).get_response()["model_version"] == "3"
        assert simple_request(client, version="1").get_response()["model_version"] == "1"
        with pytest.raises(Exception, match="Request for unknown model: 'simple' version 2 is not found"):
            simple_request(client, version="2")
        client.unload_model("simple")
        rows = index_by_name(client)["simple"]
        assert {(r["version"], r["state"], r["reason"]) for r in rows} == {
            ("1", "UNAVAILABLE", "unloaded"),
            ("3", "UNAVAILABLE", "unloaded"),
        }
    finally:
        server.stop()


def test_poll_mode_picks_up_changes(repo: Path, tmp_path: Path) -> None:
    server = start_server(
        repo, tmp_path / "server.log", "--model-control-mode", "poll", "--repository-poll-secs", "0.3"
    )
    try:
        client = thttp.InferenceServerClient(server.http_url)
        assert simple_request(client).get_response()["model_version"] == "1"
        with pytest.raises(Exception, match="not allowed in model control mode 'poll'"):
            client.load_model("simple")
        # A new version appears: it replaces version 1 (latest policy) once READY.
        staging = tmp_path / "staging"
        shutil.copytree(repo / "simple" / "1", staging)
        staging.rename(repo / "simple" / "2")
        wait_for(lambda: client.get_model_metadata("simple")["versions"] == ["2"])
        assert simple_request(client).get_response()["model_version"] == "2"
        # A new model appears, and a removed one goes away.
        shutil.copytree(MODEL_REPO / "simple_fp32", repo / "simple_fp32")
        wait_for(lambda: client.is_model_ready("simple_fp32"))
        shutil.rmtree(repo / "simple_fp32")
        wait_for(lambda: not client.is_model_ready("simple_fp32"))
        assert client.is_model_ready("simple")
    finally:
        server.stop()
