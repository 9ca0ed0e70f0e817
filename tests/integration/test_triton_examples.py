"""What Triton's own examples and QA models do, re-created with models of our own (``triton_examples/``)
against a real server with the official ``tritonclient``: a zero-input BLS model naming its callee as
bytes, a model folder holding only ``1/model.py``, custom metrics from a Python model, a Python model
that leaves out an output (alone and as an ensemble step), ensembles that take their labels from the
composing model, and ensemble steps that feed no requested output (which must not run).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from ..conftest import RunningServer, start_server
from ..ensembles.repo import add_ensemble, add_simple, scheduling, step, tensors

MODELS = Path(__file__).parent / "triton_examples"


def build_repository(root: Path) -> Path:
    repo = root / "models"
    add_simple(repo)
    add_simple(repo, "simple_a")
    add_simple(repo, "simple_b")
    for model in MODELS.iterdir():
        if model.is_dir():
            shutil.copytree(model, repo / model.name, ignore=shutil.ignore_patterns("__pycache__"))
    add_ensemble(
        repo,
        "labelled_ensemble",
        "max_batch_size: 4\n"
        + tensors("input", "IN", datatype="TYPE_FP32")
        + tensors("output", "CLASSES", datatype="TYPE_FP32")
        + scheduling(step("labelled", {"X": "IN"}, {"SCORES": "CLASSES"})),
    )
    ab = {"INPUT0": "A", "INPUT1": "B"}
    add_ensemble(  # two independent steps: asking for OUT_A must not run simple_b
        repo,
        "two_branches",
        "max_batch_size: 8\n"
        + tensors("input", "A", "B")
        + tensors("output", "OUT_A", "OUT_B", "TWICE_A")
        + scheduling(
            step("simple_a", ab, {"OUTPUT0": "OUT_A", "OUTPUT1": "DIFF_A"}),
            step("simple_b", ab, {"OUTPUT0": "OUT_B"}),
            step("simple", {"INPUT0": "OUT_A", "INPUT1": "DIFF_A"}, {"OUTPUT0": "TWICE_A"}),
        ),
    )
    add_ensemble(
        repo,
        "partial_ensemble",
        "max_batch_size: 4\n"
        + tensors("input", "X", datatype="TYPE_FP32", dims="1")
        + tensors("output", "E_TWICE", "E_NEVER", datatype="TYPE_FP32", dims="1")
        + scheduling(step("partial", {"X": "X"}, {"TWICE": "E_TWICE", "NEVER": "E_NEVER"})),
    )
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = build_repository(tmp_path_factory.mktemp("triton_examples"))
    running = start_server(repo, repo.parent / "server.log", "--allow-python-models")
    yield running
    running.stop()


def _http(server: RunningServer) -> thttp.InferenceServerClient:
    return thttp.InferenceServerClient(server.http_url)


def _input(module, name: str, array: np.ndarray, datatype: str):
    tensor = module.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _stats(server: RunningServer, model: str) -> dict:
    return httpx.get(f"http://{server.http_url}/v2/models/{model}/stats", timeout=10).json()["model_stats"][0]


def test_zero_input_model_calls_a_model_named_as_bytes(server: RunningServer) -> None:
    expected = np.arange(16, dtype=np.int32) + 1
    rest = _http(server).infer("zero_input_bls", [])
    np.testing.assert_array_equal(rest.as_numpy("SUM"), expected)
    grpc = tgrpc.InferenceServerClient(server.grpc_url).infer("zero_input_bls", [])
    np.testing.assert_array_equal(grpc.as_numpy("SUM"), expected)
    metadata = _http(server).get_model_metadata("zero_input_bls")
    assert metadata["inputs"] == []


def test_a_folder_with_only_model_py_is_completed_by_the_model(server: RunningServer) -> None:
    config = _http(server).get_model_config("autocomplete_only")
    assert config["backend"] == "python" and config["max_batch_size"] == 4
    assert [t["name"] for t in config["input"]] == ["X"] and [t["name"] for t in config["output"]] == ["Y"]
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    result = _http(server).infer("autocomplete_only", [_input(thttp, "X", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("Y"), x * 3)


def _metrics(server: RunningServer) -> str:
    return httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text


def test_custom_metrics_of_a_python_model_reach_metrics(server: RunningServer) -> None:
    labels = 'model="metrics_model",version="1"'
    before = _metrics(server)
    assert "# HELP ferry_test_requests requests this model saw\n# TYPE ferry_test_requests counter\n" in before
    assert "# TYPE ferry_test_inputs histogram" in before
    start = int(re.search(rf"^ferry_test_requests{{{labels}}} (\S+)$", before, re.M).group(1))
    client = _http(server)
    for value in (0.5, 2.0, 7.0):
        client.infer("metrics_model", [_input(thttp, "X", np.array([value], dtype=np.float32), "FP32")])
    text = _metrics(server)
    assert re.search(rf"^ferry_test_requests{{{labels}}} {start + 3}$", text, re.M), text
    assert f"ferry_test_last_input{{{labels}}} 7\n" in text
    for bound, count in (("1", 1), ("2.5", 2), ("10", 3), ("+Inf", 3)):
        assert f'ferry_test_inputs_bucket{{{labels},le="{bound}"}} {count}\n' in text, text
    assert f"ferry_test_inputs_count{{{labels}}} 3\n" in text
    assert f"ferry_test_inputs_sum{{{labels}}} 9.5\n" in text
    assert "nv_inference_request_success" in text  # the server's own metrics are still there


def test_a_python_model_that_leaves_out_an_output_returns_the_others(server: RunningServer) -> None:
    x = np.array([[1.5], [2.0]], dtype=np.float32)
    for model, twice in (("partial", "TWICE"), ("partial_ensemble", "E_TWICE")):
        result = _http(server).infer(model, [_input(thttp, "X", x, "FP32")])
        assert [o["name"] for o in result.get_response()["outputs"]] == [twice]
        np.testing.assert_array_equal(result.as_numpy(twice), x * 2)
        asked = _http(server).infer(model, [_input(thttp, "X", x, "FP32")], outputs=[thttp.InferRequestedOutput(twice)])
        np.testing.assert_array_equal(asked.as_numpy(twice), x * 2)
        grpc = tgrpc.InferenceServerClient(server.grpc_url).infer(model, [_input(tgrpc, "X", x, "FP32")])
        assert [o.name for o in grpc.get_response().outputs] == [twice]
    # asking a Python model for the output it left out fails
    with pytest.raises(InferenceServerException) as caught:
        _http(server).infer("partial", [_input(thttp, "X", x, "FP32")], outputs=[thttp.InferRequestedOutput("NEVER")])
    assert "returned no output 'NEVER', which the request asked for" in caught.value.message()


@pytest.mark.parametrize("module", [thttp, tgrpc])
def test_an_ensemble_output_no_step_produced_is_left_out_and_logged(server: RunningServer, module) -> None:
    """Triton's ensemble answers with the outputs that exist when the client named one a step left
    out, and logs the missing one (not INTERNAL)."""
    x = np.array([[1.5], [2.0]], dtype=np.float32)
    client = _http(server) if module is thttp else tgrpc.InferenceServerClient(server.grpc_url)
    named = [module.InferRequestedOutput("E_TWICE"), module.InferRequestedOutput("E_NEVER")]
    result = client.infer("partial_ensemble", [_input(module, "X", x, "FP32")], outputs=named, request_id="ask-never")
    np.testing.assert_array_equal(result.as_numpy("E_TWICE"), x * 2)
    assert result.as_numpy("E_NEVER") is None
    only = client.infer("partial_ensemble", [_input(module, "X", x, "FP32")], outputs=named[1:])
    assert only.as_numpy("E_TWICE") is None and only.as_numpy("E_NEVER") is None
    assert "ensemble 'partial_ensemble': no step produced output 'E_NEVER', which request 'ask-never'" in (server.log())


@pytest.mark.parametrize("model", ["labelled", "labelled_ensemble"])
def test_classification_labels_come_from_the_composing_model(server: RunningServer, model: str) -> None:
    scores = np.arange(16, dtype=np.float32).reshape(1, 16)
    for module in (thttp, tgrpc):
        client = module.InferenceServerClient(server.http_url if module is thttp else server.grpc_url)
        name = "SCORES" if model == "labelled" else "CLASSES"
        result = client.infer(
            model,
            [_input(module, "IN" if model != "labelled" else "X", scores, "FP32")],
            outputs=[module.InferRequestedOutput(name, class_count=2)],
        )
        assert result.as_numpy(name).tolist() == [[b"15.000000:15:label15", b"14.000000:14:label14"]]


def test_steps_that_feed_no_requested_output_do_not_run(server: RunningServer) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.int32)
    inputs = [_input(thttp, "A", a, "INT32"), _input(thttp, "B", b, "INT32")]
    runs = {m: _stats(server, m)["execution_count"] for m in ("simple", "simple_a", "simple_b")}
    client = _http(server)
    result = client.infer("two_branches", inputs, outputs=[thttp.InferRequestedOutput("OUT_A")])
    np.testing.assert_array_equal(result.as_numpy("OUT_A"), a + b)
    after = {m: _stats(server, m)["execution_count"] for m in runs}
    assert after == {"simple": runs["simple"], "simple_a": runs["simple_a"] + 1, "simple_b": runs["simple_b"]}
    result = client.infer("two_branches", inputs, outputs=[thttp.InferRequestedOutput("TWICE_A")])
    np.testing.assert_array_equal(result.as_numpy("TWICE_A"), 2 * a)  # (a+b) + (a-b)
    final = {m: _stats(server, m)["execution_count"] for m in runs}
    assert final == {"simple": runs["simple"] + 1, "simple_a": runs["simple_a"] + 2, "simple_b": runs["simple_b"]}
    everything = client.infer("two_branches", inputs)  # no outputs named: every step runs
    np.testing.assert_array_equal(everything.as_numpy("OUT_B"), a + b)
    assert _stats(server, "simple_b")["execution_count"] == runs["simple_b"] + 1
