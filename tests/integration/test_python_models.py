"""Triton Python models (``model.py``) served by a real Ferry server, only when allowed.

The models under ``python_models/`` re-create Triton's documented examples (add/sub, a BYTES
identity, calls to an ONNX model through ``InferenceRequest.exec``) plus a model the test can
hold busy (batching) and one that fails on demand (exceptions and crashes of an isolated child);
ensembles use them as steps. A second server on the same repository, started without the option,
refuses every one of them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from ..conftest import MODEL_REPO, RunningServer, start_server
from ..ensembles.repo import add_ensemble, add_sub_twice, scheduling, step, tensors

MODELS = Path(__file__).parent / "python_models"
ISOLATED = 'parameters { key: "FERRY_ISOLATION" value { string_value: "process" } }\n'


ONE_LIFE = """

_execute = TritonPythonModel.execute


class TritonPythonModel(TritonPythonModel):  # noqa: F811 - the faulty model, started once only
    def initialize(self, args):
        import pathlib

        started = pathlib.Path({!r}) / "one_life_started"
        if started.exists():
            raise RuntimeError("started before")
        started.write_text("1")

    execute = _execute
"""


def build_repository(root: Path) -> Path:
    """The example models, the ONNX "simple" model they call, and models that must be refused."""
    repo = root / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    for model in MODELS.iterdir():
        if model.is_dir():
            shutil.copytree(model, repo / model.name, ignore=shutil.ignore_patterns("__pycache__"))
    gate = root / "gate"
    gate.mkdir()
    with open(repo / "gated" / "config.pbtxt", "a") as config:
        config.write(f'parameters {{ key: "GATE_DIR" value {{ string_value: "{gate}" }} }}\n')
    shutil.copytree(repo / "faulty", repo / "faulty_isolated")
    with open(repo / "faulty_isolated" / "config.pbtxt", "a") as config:
        config.write(ISOLATED)
    refused = {
        "decoupled_isolated": "model_transaction_policy { decoupled: true }\n" + ISOLATED,
        "env_path": 'parameters { key: "EXECUTION_ENV_PATH" value { string_value: "env.tar.gz" } }\n',
        "bad_isolation": 'parameters { key: "FERRY_ISOLATION" value { string_value: "thread" } }\n',
        "gpu_inputs": 'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "no" } }\n',
    }
    for name, extra in refused.items():
        shutil.copytree(repo / "add_sub", repo / name)
        with open(repo / name / "config.pbtxt", "a") as config:
            config.write(extra)
    # Python models as ensemble steps: before an ONNX step, alone, and gated (for batching).
    add_ensemble(repo, "python_then_onnx", add_sub_twice(first="simple_python", second="simple"))
    for name, model, output in (("faulty_ensemble", "faulty", "Y"), ("gated_ensemble", "gated", "BATCH")):
        body = tensors("input", "X", dims="1") + tensors("output", output, dims="1")
        add_ensemble(repo, name, "max_batch_size: 8\n" + body + scheduling(step(model, {"X": "X"}, {output: output})))
    one_life = repo / "one_life"  # isolated; its second initialize fails, so a crash cannot be repaired
    shutil.copytree(repo / "faulty_isolated", one_life)
    (one_life / "1" / "model.py").write_text(
        (MODELS / "faulty" / "1" / "model.py").read_text() + ONE_LIFE.format(str(root))
    )
    shutil.copytree(repo / "add_sub", repo / "broken_init")
    (repo / "broken_init" / "1" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('no weights here')\n"
    )
    return repo


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("python_models"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RunningServer]:
    running = start_server(
        repository,
        repository.parent / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--allow-python-models",
    )
    yield running
    running.stop()


def index(server: RunningServer) -> dict[str, dict]:
    rows = httpx.post(f"http://{server.http_url}/v2/repository/index", timeout=10).json()
    return {row["name"]: row for row in rows}


def infer(server: RunningServer, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    tensors = []
    for name, array in inputs.items():
        tensor = thttp.InferInput(name, list(array.shape), "BYTES" if array.dtype == object else _v2(array))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    # closed in the thread that made it: tritonclient's __del__ in another thread finds no gevent loop
    client = thttp.InferenceServerClient(server.http_url)
    try:
        result = client.infer(model, tensors)
    finally:
        client.close()
    return {output["name"]: result.as_numpy(output["name"]) for output in result.get_response()["outputs"]}


def _v2(array: np.ndarray) -> str:
    return {"int32": "INT32", "int64": "INT64", "float32": "FP32"}[array.dtype.name]


def x_input(value: int) -> dict[str, np.ndarray]:
    return {"X": np.array([[value]], dtype=np.int32)}


def http_error(server: RunningServer, model: str, value: int) -> tuple[int, str]:
    body = {"inputs": [{"name": "X", "shape": [1, 1], "datatype": "INT32", "data": [value]}]}
    response = httpx.post(f"http://{server.http_url}/v2/models/{model}/infer", json=body, timeout=30)
    return response.status_code, response.json().get("error", "")


def test_add_sub_over_rest_and_grpc(server: RunningServer) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 0.5, dtype=np.float32)
    rest = infer(server, "add_sub", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(rest["OUTPUT0"], a + b)
    np.testing.assert_array_equal(rest["OUTPUT1"], a - b)
    client = tgrpc.InferenceServerClient(server.grpc_url)
    tensors = [tgrpc.InferInput(n, [3, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    tensors[0].set_data_from_numpy(a)
    tensors[1].set_data_from_numpy(b)
    result = client.infer("add_sub", tensors)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert client.get_model_metadata("add_sub").platform == "python"


def test_identity_on_bytes_with_auto_completed_config(server: RunningServer) -> None:
    metadata = httpx.get(f"http://{server.http_url}/v2/models/identity_bytes", timeout=10).json()
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1, -1]}]
    config = httpx.get(f"http://{server.http_url}/v2/models/identity_bytes/config", timeout=10).json()
    assert config["max_batch_size"] == 8
    words = np.array([[b"ferry", b"\x00\xffbinary\x00"], [b"", "caf\u00e9".encode()]], dtype=object)
    out = infer(server, "identity_bytes", {"INPUT0": words})["OUTPUT0"]
    assert out.tolist() == words.tolist()


def _simple_inputs() -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    return a, np.full((2, 16), 3, dtype=np.int32)


def test_python_model_calls_onnx_model_in_process(server: RunningServer) -> None:
    a, b = _simple_inputs()
    target = np.array([[b"simple"], [b"simple"]], dtype=object)
    out = infer(server, "bls_simple", {"INPUT0": a, "INPUT1": b, "TARGET": target})
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)  # computed by ONNX Runtime in "simple"
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
    stats = httpx.get(f"http://{server.http_url}/v2/models/simple/stats", timeout=10).json()
    assert stats["model_stats"][0]["inference_count"] >= 2
    missing = np.array([[b"no_such_model"]], dtype=object)
    with pytest.raises(InferenceServerException) as caught:  # the callee's error reaches the caller
        infer(server, "bls_simple", {"INPUT0": a[:1], "INPUT1": b[:1], "TARGET": missing})
    assert (
        caught.value.status() == "404"
        and "Request for unknown model: 'no_such_model' is not found" in caught.value.message()
    )


def test_async_execute_in_isolated_child_calls_onnx_model(server: RunningServer) -> None:
    a, b = _simple_inputs()
    out = infer(server, "bls_async", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(out["SUM_TWICE"], 2 * (a + b))


def _pending(server: RunningServer, model: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    match = re.search(rf'nv_inference_pending_request_count{{model="{model}",version="1"}} (\S+)', text)
    return float(match.group(1)) if match else -1.0


def _wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _gated_stats(server: RunningServer) -> tuple[int, int]:
    stats = httpx.get(f"http://{server.http_url}/v2/models/gated/stats", timeout=10).json()["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


@pytest.mark.parametrize("model", ["gated", "gated_ensemble"])
def test_execute_receives_the_batch_the_dynamic_batcher_formed(
    server: RunningServer, repository: Path, model: str
) -> None:
    """Hold the only instance busy, queue 8 requests behind it, release: they run as one batch,
    whether they reach the Python model directly or as a step of an ensemble."""
    gate = repository.parent / "gate"
    for name in ("entered", "release"):
        (gate / name).unlink(missing_ok=True)
    before = _gated_stats(server)
    results: dict[int, np.ndarray] = {}

    def send(value: int) -> None:
        results[value] = infer(server, model, x_input(value))["BATCH"]

    holder = threading.Thread(target=send, args=(-1,))
    holder.start()
    _wait_for(lambda: (gate / "entered").exists(), "the gated request to hold the instance")
    queued = [threading.Thread(target=send, args=(value,)) for value in range(8)]
    for thread in queued:
        thread.start()
    _wait_for(lambda: _pending(server, "gated") == 9, "8 requests queued behind the held one")
    (gate / "release").write_text("1")
    for thread in (holder, *queued):
        thread.join(60)
    assert results[-1].tolist() == [[1]]
    assert [results[v].tolist() for v in range(8)] == [[[8]]] * 8
    after = _gated_stats(server)
    assert (after[0] - before[0], after[1] - before[1]) == (9, 2)


def test_ensemble_with_python_steps(server: RunningServer) -> None:
    a, b = _simple_inputs()
    out = infer(server, "python_then_onnx", {"A": a, "B": b})  # (a+b, a-b) in Python, then ONNX: (2a, 2b)
    np.testing.assert_array_equal(out["TWICE_A"], 2 * a)
    np.testing.assert_array_equal(out["TWICE_B"], 2 * b)
    assert infer(server, "faulty_ensemble", x_input(7))["Y"].tolist() == [[7]]
    step_error = "ensemble 'faulty_ensemble' step 0 (model 'faulty'): two"
    assert http_error(server, "faulty_ensemble", 2) == (400, step_error)  # a Python step's error keeps its status
    status, message = http_error(server, "faulty_ensemble", 1)
    assert status == 500 and "X = 1 is not allowed" in message


def test_errors_in_user_code_fail_the_request_with_its_message(server: RunningServer) -> None:
    status, message = http_error(server, "faulty", 1)
    assert status == 500 and "execute() raised ValueError: X = 1 is not allowed" in message
    assert http_error(server, "faulty", 2) == (400, "two")
    status, message = http_error(server, "faulty", 4)
    assert status == 500 and "output 'Y' has numpy dtype float64, but the config declares int32" in message
    client = tgrpc.InferenceServerClient(server.grpc_url)
    tensor = tgrpc.InferInput("X", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[2]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("faulty", [tensor])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT" and caught.value.message() == "two"
    assert infer(server, "faulty", x_input(5))["Y"].tolist() == [[5]]


def test_crash_of_an_isolated_child_fails_its_request_and_a_new_child_serves(server: RunningServer) -> None:
    first = int(infer(server, "faulty_isolated", x_input(5))["PID"][0, 0])
    status, message = http_error(server, "faulty_isolated", 3)  # the model kills its own process
    assert status == 500 and f"child process (pid {first}) died with signal SIGKILL" in message, message
    second = int(infer(server, "faulty_isolated", x_input(5))["PID"][0, 0])
    assert second != first
    # Killed from outside while idle: replaced before the next request, which succeeds.
    signal_and_wait_dead(second)
    third = infer(server, "faulty_isolated", x_input(6))
    assert third["Y"].tolist() == [[6]] and int(third["PID"][0, 0]) not in (first, second)
    assert server.process.poll() is None


def test_an_isolated_instance_whose_child_cannot_restart_answers_unavailable(server: RunningServer) -> None:
    assert infer(server, "one_life", x_input(5))["Y"].tolist() == [[5]]
    status, message = http_error(server, "one_life", 3)
    assert status == 500 and "died with signal SIGKILL while executing this batch" in message
    status, message = http_error(server, "one_life", 5)
    assert status == 503, message
    assert "its child process could not be restarted" in message and "RuntimeError: started before" in message
    assert server.process.poll() is None


def signal_and_wait_dead(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)

    def dead() -> bool:
        """A zombie with no thread left (the leader turns Z before its other threads have exited,
        and only then can the server's waitpid see the exit)."""
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
            return state == "Z" and os.listdir(f"/proc/{pid}/task") == [str(pid)]
        except FileNotFoundError:
            return True

    _wait_for(dead, f"process {pid} to die")


def test_loading_and_unloading_an_isolated_model_starts_and_ends_its_child(
    server: RunningServer, repository: Path
) -> None:
    shutil.copytree(repository / "faulty_isolated", repository / "loaded_later")
    url = f"http://{server.http_url}/v2/repository/models/loaded_later"
    assert httpx.post(f"{url}/load", timeout=60).status_code == 200
    pid = int(infer(server, "loaded_later", x_input(5))["PID"][0, 0])
    assert pid != server.process.pid and Path(f"/proc/{pid}").exists()
    assert httpx.post(f"{url}/unload", timeout=60).status_code == 200
    assert not Path(f"/proc/{pid}").exists()  # unload returns once the child has exited and been reaped
    assert index(server)["loaded_later"]["state"] == "UNAVAILABLE"


def test_unsupported_python_model_features_are_refused_at_load(server: RunningServer) -> None:
    rows = index(server)
    expected = {
        "decoupled_isolated": "parameter FERRY_ISOLATION: a decoupled model runs in the server's process; "
        "'process' isolation is not supported for it",
        "env_path": "parameter EXECUTION_ENV_PATH is not supported",
        "bad_isolation": "parameter FERRY_ISOLATION is 'thread'; expected one of: none, process",
        "broken_init": "initialize failed: RuntimeError: no weights here",
        "gpu_inputs": "parameter FORCE_CPU_ONLY_INPUT_TENSORS: 'no' is not supported",
    }
    for name, reason in expected.items():
        assert rows[name]["state"] == "UNAVAILABLE" and reason in rows[name]["reason"], rows[name]
    ready = ("add_sub", "identity_bytes", "bls_simple", "bls_async", "gated", "faulty", "faulty_isolated", "one_life")
    for name in (*ready, "simple_python", "python_then_onnx", "faulty_ensemble", "gated_ensemble"):
        assert rows[name]["state"] == "READY", rows[name]


def test_python_models_are_refused_unless_the_server_allows_them(repository: Path, tmp_path: Path) -> None:
    running = start_server(repository, tmp_path / "server.log", "--model-control-mode", "explicit", "--load-model", "*")
    try:
        rows = index(running)
        assert rows["simple"]["state"] == "READY"
        for name in ("add_sub", "identity_bytes", "faulty_isolated"):
            assert rows[name]["state"] == "UNAVAILABLE", rows[name]
            assert "--allow-python-models" in rows[name]["reason"], rows[name]
        status, message = http_error(running, "faulty", 5)
        assert status == 503 and "--allow-python-models" in message
    finally:
        running.stop()
