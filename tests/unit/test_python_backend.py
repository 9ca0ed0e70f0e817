"""Ferry's Triton Python-backend API without a server: pb_utils, the runner, the scheduler hook."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from ferry.backends.base import InstanceSpec, ModelIO, RequestBatchInstance
from ferry.backends.python_backend import PythonBackend
from ferry.backends.python_backend import triton_python_backend_utils as pb_utils
from ferry.backends.python_backend.host import HOST
from ferry.backends.python_backend.runner import Failure, ModelLoadFailure, ModelRunner
from ferry.errors import FerryError, Unavailable
from ferry.repository.config import config_to_dict, parse_config_text
from ferry.scheduling import RequestBatchScheduler, SchedulingPolicy
from ferry.scheduling.interface import Execution
from ferry.statistics import ModelStats
from ferry_client.protocol import model_config_pb2 as mc

MODELS = Path(__file__).parents[1] / "integration" / "python_models"


def runner(model: str) -> ModelRunner:
    config = parse_config_text((MODELS / model / "config.pbtxt").read_text(), model)
    config.name = model
    args = {"model_name": model, "model_instance_name": f"{model}_0", "model_version": "1"}
    return ModelRunner(MODELS / model / "1" / "model.py", config_to_dict(config), args)


def test_tensor_keeps_the_array_and_speaks_dlpack() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("x", array)
    assert tensor.as_numpy() is array and tensor.triton_dtype() == 11 and tensor.name() == "x"
    assert type(tensor.to_dlpack()).__name__ == "PyCapsule"
    back = pb_utils.Tensor.from_dlpack("y", array)  # any object with __dlpack__ (a CPU torch tensor)
    assert np.shares_memory(back.as_numpy(), array)
    with pytest.raises(pb_utils.TritonModelException, match="np.object_"):
        pb_utils.Tensor("s", np.array(["text"]))


def test_bytes_tensor_serialisation_round_trips() -> None:
    items = np.array([b"a", b"", b"\x00\xff"], dtype=object)
    encoded = pb_utils.serialize_byte_tensor(items)
    assert pb_utils.deserialize_bytes_tensor(encoded.tobytes()).tolist() == items.tolist()


def test_auto_complete_config_refuses_a_conflicting_input() -> None:
    config = pb_utils.ModelConfig({"input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}]})
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4]})  # the same: accepted
    with pytest.raises(pb_utils.TritonModelException, match="'A' has dims"):
        config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [5]})


def test_runner_answers_each_request_of_a_batch() -> None:
    model = runner("add_sub")
    a = [np.ones((1, 4), np.float32), np.full((2, 4), 2, np.float32)]
    results = model.execute([{"INPUT0": x, "INPUT1": x} for x in a], [["OUTPUT0"], ["OUTPUT0", "OUTPUT1"]])
    assert list(results[0]) == ["OUTPUT0"] and results[0]["OUTPUT0"].tolist() == [[2.0] * 4]
    assert results[1]["OUTPUT1"].shape == (2, 4)


def test_runner_turns_exceptions_and_bad_answers_into_failures() -> None:
    model = runner("faulty")
    x = [{"X": np.array([[v]], np.int32)} for v in (5, 2, 4)]
    ok, invalid, wrong_type = model.execute(x, [["Y"]] * 3)
    assert ok["Y"].tolist() == [[5]]
    assert invalid == Failure("two", "INVALID_ARGUMENT")
    assert isinstance(wrong_type, Failure) and "dtype float64" in wrong_type.message
    raised = model.execute([{"X": np.array([[1]], np.int32)}, x[0]], [["Y"], ["Y"]])
    assert raised == [Failure("python model 'faulty' execute() raised ValueError: X = 1 is not allowed")] * 2


def test_runner_reports_a_broken_initialize(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("class TritonPythonModel:\n    def initialize(self, args):\n        1 / 0\n")
    with pytest.raises(ModelLoadFailure, match="initialize failed: ZeroDivisionError"):
        ModelRunner(tmp_path / "model.py", {}, {"model_name": "m"})


def test_backend_refuses_python_models_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HOST, "allowed", False)
    config = mc.ModelConfig(name="m")
    with pytest.raises(Unavailable, match="--allow-python-models"):
        PythonBackend().create_instance(MODELS / "add_sub" / "1" / "model.py", config, InstanceSpec("m_0", "CPU"))


def test_settings_read_the_allow_option_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from ferry.settings import Settings

    assert Settings().allow_python_models is False
    monkeypatch.setenv("FERRY_ALLOW_PYTHON_MODELS", "1")
    assert Settings().allow_python_models is True


class RequestsInstance(RequestBatchInstance):
    """A fake instance that takes a batch as separate requests (as Python models do)."""

    def __init__(self) -> None:
        self.spec = InstanceSpec(name="r", kind="CPU")
        self.io = ModelIO([], [])
        self.device = "cpu"
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.batches: list[int] = []

    def compute_requests(self, inputs, outputs, sinks=None, parameters=None):
        self.entered.set()
        self.gate.wait(10)
        self.batches.append(len(inputs))
        return [FerryError("bad") if r["x"][0, 0] < 0 else {"y": r["x"] + 1} for r in inputs]

    def compute(self, inputs, outputs):  # pragma: no cover - the scheduler must not call it
        raise AssertionError("compute() called on a request-batch instance")

    def close(self) -> None:
        pass


@pytest.mark.asyncio
async def test_scheduler_hands_request_batches_over_unconcatenated() -> None:
    instance = RequestsInstance()
    stats = ModelStats("m", "1")
    scheduler = RequestBatchScheduler("m", [instance], stats, SchedulingPolicy(max_batch_size=8, dynamic=True))
    scheduler.start()
    first = asyncio.create_task(scheduler.submit(Execution({"x": np.array([[0]])}, ["y"])))
    await asyncio.to_thread(instance.entered.wait, 10)
    rows = [1, 2, 3, -1]
    queued = [
        asyncio.create_task(scheduler.submit(Execution({"x": np.array([[v]] * v if v > 0 else [[v]])}, ["y"])))
        for v in rows
    ]
    while scheduler.queue_size < len(rows):
        await asyncio.sleep(0.001)
    instance.gate.set()
    results = await asyncio.gather(first, *queued, return_exceptions=True)
    assert results[1]["y"].tolist() == [[2]] and results[3]["y"].shape == (3, 1)
    assert isinstance(results[4], FerryError) and str(results[4]) == "bad"
    assert instance.batches == [1, 4]
    assert json.loads(json.dumps(stats.as_dict()))["execution_count"] == 2
    await scheduler.stop()
