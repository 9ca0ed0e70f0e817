"""The model process's side of the hand-off takes a frame's requests in one pass: each plain request
is validated and queued on the model's scheduler in the turn its frame arrived, with no task per
request (``DataPlane.infer_soon``; with plans, a signature is validated once and its requests
queued with no future each, ``DataPlane.plan``), and still answered, refused, cancelled and counted
one by one. Real data plane, real ``simple`` ONNX model, real hand-off socket; the engine is held by
a gate so the requests are in flight while the test looks. Each test runs with the hub a server
builds (plans) and with one that has none (``infer_soon`` alone)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferry.api.dataplane import DataPlane
from ferry.errors import InvalidArgument
from ferry.inference import path as path_module
from ferry.intake import handoff as handoff_module
from ferry.intake.handoff import HandoffClient, HandoffHub, StaleModel
from ferry.intake.model_directory import ModelDirectory
from ferry.repository.manager import ControlMode, ModelManager
from ferry.repository.model import ModelVersion
from ferry.types import InferenceRequest

from ..conftest import MODEL_REPO

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["plans", "infer_soon"])
def planned(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "plans")


@contextlib.asynccontextmanager
async def _model_process(
    tmp_path: Path, planned: bool = True, batching: bool = False
) -> AsyncIterator[tuple[DataPlane, HandoffHub, HandoffClient]]:
    """A model process's data plane serving ``simple`` (``batching``: with ``dynamic_batching``)
    behind a hub (with the data plane's plans, as a server's, or without), and an intake's client."""
    shutil.copytree(MODEL_REPO / "simple", tmp_path / "models" / "simple")
    if batching:
        with open(tmp_path / "models" / "simple" / "config.pbtxt", "a") as config:
            config.write("dynamic_batching { }\n")
    manager = ModelManager(tmp_path / "models", control_mode=ControlMode.EXPLICIT, startup_models=["simple"])
    await manager.start()
    plane = DataPlane(manager)
    plane.started = True
    plans = plane if planned else None
    hub = HandoffHub(
        plane.infer, 1 << 22, ModelDirectory(plane), plane.admission, infer_soon=plane.infer_soon, plans=plans
    )
    await hub.start(str(tmp_path / "hub.sock"))
    client = HandoffClient(1, 1 << 22)
    try:
        await client.connect(str(tmp_path / "hub.sock"))
        yield plane, hub, client
    finally:
        client.close()
        await hub.close()
        await manager.stop()


@contextlib.contextmanager
def _gate(model: ModelVersion, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold the model's engine until the gate opens (at the latest on leaving: the engine must not
    run past its model's unloading); ``started`` says a run began."""
    instance = model.instances[0]
    compute = instance.compute
    gate, started = threading.Event(), threading.Event()

    def gated(inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        started.set()
        gate.wait(30)
        return compute(inputs, outputs)

    monkeypatch.setattr(instance, "compute", gated)
    try:
        yield gate, started
    finally:
        gate.set()


def _request(value: int, datatype: str = "INT32") -> InferenceRequest:
    x = np.full((1, 16), value, dtype=np.int32)
    return InferenceRequest(
        "simple", inputs={"INPUT0": x, "INPUT1": np.ones_like(x)}, input_datatypes={"INPUT0": datatype}
    )


def _serving_tasks() -> list[asyncio.Task]:
    """Tasks the hub made to serve a request (the path it takes for requests that need more)."""
    return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "HubConnection._serve"]


async def _until(condition: Any) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


def _stats(model: ModelVersion) -> dict[str, Any]:
    stats = model.stats.as_dict()
    return {
        "success": stats["inference_stats"]["success"]["count"],
        "fail": stats["inference_stats"]["fail"]["count"],
        "failures": model.stats.snapshot()["failures"],
        "inference_count": stats["inference_count"],
    }


async def test_a_frame_of_requests_is_queued_without_a_task_each_and_a_bad_one_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planned: bool
) -> None:
    async with _model_process(tmp_path, planned) as (plane, hub, client):
        model = plane.model("simple")
        with _gate(model, monkeypatch) as (gate, started):
            # sent in one loop turn: one frame of five Infers, the third of the wrong datatype
            requests = [_request(1), _request(2), _request(3, "FP32"), _request(4), _request(5)]
            calls = [asyncio.ensure_future(client.infer(r)) for r in requests]
            await _until(lambda: model.scheduler.in_flight == 4)  # queued in the frame's turn: one runs, three wait
            assert started.wait(10)
            assert _serving_tasks() == []  # no task per request in the model process
            assert [c.handed_off for c in hub.connections] == [5]
            gate.set()
            answers = await asyncio.gather(*calls, return_exceptions=True)
            bad = answers.pop(2)
            assert isinstance(bad, InvalidArgument) and "expected datatype INT32, got FP32" in str(bad)
            for value, response in zip([1, 2, 4, 5], answers, strict=True):
                assert not isinstance(response, BaseException)
                outputs = {o.name: o.data for o in response.outputs}
                np.testing.assert_array_equal(outputs["OUTPUT0"], np.full((1, 16), value + 1, np.int32))
                np.testing.assert_array_equal(outputs["OUTPUT1"], np.full((1, 16), value - 1, np.int32))
            assert _stats(model) == {"success": 4, "fail": 1, "failures": {"OTHER": 1}, "inference_count": 4}
            assert model.scheduler.in_flight == 0 and client._requests.used_bytes == 0


async def test_cancelling_one_request_of_a_frame_cancels_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planned: bool
) -> None:
    async with _model_process(tmp_path, planned) as (plane, hub, client):
        model = plane.model("simple")
        with _gate(model, monkeypatch) as (gate, started):
            calls = [asyncio.ensure_future(client.infer(_request(value))) for value in range(3)]
            await _until(lambda: model.scheduler.in_flight == 3 and model.scheduler.queue_size == 2)
            assert started.wait(10)
            calls[2].cancel()  # queued behind the gated run: the intake sends Cancel, the hub cancels its future
            await _until(lambda: model.scheduler.queue_size == 1)  # out of the queue before the engine is free
            gate.set()
            answers = await asyncio.gather(*calls, return_exceptions=True)
            assert isinstance(answers[2], asyncio.CancelledError)
            assert [int(a.outputs[0].data[0, 0]) for a in answers[:2]] == [1, 2]  # type: ignore[union-attr]
            await _until(lambda: client._requests.used_bytes == 0)  # the cancelled one was answered: its block freed
            assert _stats(model) == {"success": 2, "fail": 1, "failures": {"CANCELED": 1}, "inference_count": 2}
            assert model.scheduler.in_flight == 0


async def test_a_stale_request_of_a_frame_is_refused_and_the_others_run(tmp_path: Path, planned: bool) -> None:
    async with _model_process(tmp_path, planned) as (plane, hub, client):
        model = plane.model("simple")
        stale = client.infer(_request(1), expect=model.identity + "-an-earlier-load")
        current = client.infer(_request(2), expect=model.identity)
        answers = await asyncio.gather(stale, current, return_exceptions=True)
        assert isinstance(answers[0], StaleModel)
        assert not isinstance(answers[1], BaseException)
        assert int(answers[1].outputs[0].data[0, 0]) == 3
        assert _stats(model) == {"success": 1, "fail": 0, "failures": {}, "inference_count": 1}
        assert client._requests.used_bytes == 0


def _connection(hub: HandoffHub) -> Any:
    (connection,) = hub.connections
    return connection


async def test_requests_of_one_signature_are_validated_once_and_answered_with_their_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    validated: list[str] = []
    real = path_module.validate_inputs

    def counting(model: Any, request: InferenceRequest, *args: Any) -> Any:
        validated.append(request.id)
        return real(model, request, *args)

    monkeypatch.setattr(path_module, "validate_inputs", counting)
    async with _model_process(tmp_path, batching=True) as (plane, hub, client):
        model = plane.model("simple")
        batches: list[list[int]] = []
        on_results = client._on_results

        def received(results: Any) -> None:
            batches.append(results.calls)
            on_results(results)

        monkeypatch.setattr(client, "_on_results", received)
        with _gate(model, monkeypatch) as (gate, started):
            calls = [asyncio.ensure_future(client.infer(_request(value))) for value in range(5)]
            await _until(lambda: model.scheduler.in_flight == 5)
            assert started.wait(10)
            assert len(validated) == 1  # the first request made the plan; the other four were queued by it
            gate.set()
            answers = await asyncio.gather(*calls)
        assert [int(a.outputs[0].data[0, 0]) for a in answers] == [1, 2, 3, 4, 5]
        assert [len(calls) for calls in batches] == [5]  # one frame's requests, one batch: one message back
        assert len(_connection(hub)._plans) == 1
        wider = InferenceRequest(
            "simple", inputs={"INPUT0": np.ones((2, 16), np.int32), "INPUT1": np.ones((2, 16), np.int32)}
        )
        answer = await client.infer(wider)  # another shape: another signature, its own plan
        assert answer.outputs[0].data.shape == (2, 16)
        assert len(validated) == 2 and len(_connection(hub)._plans) == 2
        assert _stats(model) == {"success": 6, "fail": 0, "failures": {}, "inference_count": 7}


async def test_a_plan_of_a_replaced_load_is_made_again_for_the_load_that_serves(tmp_path: Path) -> None:
    async with _model_process(tmp_path) as (plane, hub, client):
        await client.infer(_request(1))
        (old,) = _connection(hub)._plans.values()
        await plane.manager.load("simple")  # a reload: a new version object serves "simple"
        current = plane.model("simple")
        assert current is not old.model
        answer = await client.infer(_request(2))
        assert int(answer.outputs[0].data[0, 0]) == 3
        (plan,) = _connection(hub)._plans.values()
        assert plan.model is current
        assert _stats(current) == {"success": 1, "fail": 0, "failures": {}, "inference_count": 1}


async def test_while_tracing_is_on_no_request_is_planned_and_each_is_sampled(tmp_path: Path) -> None:
    async with _model_process(tmp_path) as (plane, hub, client):
        await client.infer(_request(1))
        assert len(_connection(hub)._plans) == 1
        plane.tracing.update({"trace_level": ["TIMESTAMPS"], "trace_rate": ["1"], "trace_count": ["-1"]})
        for value in range(3):
            await client.infer(_request(value))
        assert plane.tracing._seen == {"simple": 3}  # each one went through the trace decision
        plane.tracing.update({"trace_level": ["OFF"]})
        answer = await client.infer(_request(4))  # planned again
        assert int(answer.outputs[0].data[0, 0]) == 5


async def test_a_batch_whose_answers_pass_one_message_s_bytes_goes_in_several(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _model_process(tmp_path, batching=True) as (plane, hub, client):
        model = plane.model("simple")
        sizes: list[int] = []
        on_results = client._on_results

        def received(results: Any) -> None:
            sizes.append(len(results.calls))
            on_results(results)

        monkeypatch.setattr(client, "_on_results", received)
        stride = 2 * handoff_module.aligned(16 * 4)  # an answer: two outputs of 16 INT32
        monkeypatch.setattr(handoff_module, "JOINED_BYTES", 2 * stride)  # two answers a message
        with _gate(model, monkeypatch) as (gate, started):
            calls = [asyncio.ensure_future(client.infer(_request(value))) for value in range(5)]
            await _until(lambda: model.scheduler.in_flight == 5)
            assert started.wait(10)
            gate.set()
            answers = await asyncio.gather(*calls)
        assert [int(a.outputs[1].data[0, 0]) for a in answers] == [-1, 0, 1, 2, 3]
        assert sizes == [2, 2, 1]


async def test_only_parameters_that_say_how_the_answer_is_encoded_are_planned(tmp_path: Path) -> None:
    async with _model_process(tmp_path) as (plane, hub, client):
        binary = _request(1)
        binary.parameters = {"binary_data_output": True, "triton_enable_empty_final_response": True}
        assert int((await client.infer(binary)).outputs[0].data[0, 0]) == 2
        (plan,) = _connection(hub)._plans.values()
        assert plan.parameters == binary.parameters and plan.answers[0][2] is True
        for parameters in ({"priority": 0}, {"a model's own": "value"}, {"binary_data_output": [1]}):
            request = _request(2)
            request.parameters = parameters
            assert int((await client.infer(request)).outputs[0].data[0, 0]) == 3
        assert len(_connection(hub)._plans) == 1  # those three took the whole path
        assert _stats(plane.model("simple"))["success"] == 4


async def test_the_plans_a_connection_keeps_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client varying its signatures without end cannot grow the model process's plans."""
    monkeypatch.setattr(handoff_module, "PLANS_KEPT", 2)
    async with _model_process(tmp_path) as (plane, hub, client):
        for rows in (1, 2, 3, 4, 5):
            x = np.full((rows, 16), rows, np.int32)
            answer = await client.infer(InferenceRequest("simple", inputs={"INPUT0": x, "INPUT1": x}))
            assert answer.outputs[0].data.shape == (rows, 16) and int(answer.outputs[0].data[0, 0]) == 2 * rows
            assert 1 <= len(_connection(hub)._plans) <= 2
        assert _stats(plane.model("simple"))["success"] == 5
