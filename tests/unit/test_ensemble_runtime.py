"""Ensembles at run time, in-process with real ONNX Runtime models: answers, batching, unloading.

Conditions are caused, never waited out: a composing model's instance is held on a gate, the test
waits for the state it needs (requests queued, a model UNLOADING), then releases it.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from ferry.api.dataplane import DataPlane
from ferry.errors import Unavailable
from ferry.repository.manager import ControlMode, ModelManager
from ferry.repository.model import ModelVersion
from ferry.types import InferenceRequest
from tests import ocr_reference as ocr

from ..ensembles.repo import add_ensemble, add_simple, add_sub_twice

STATE_WAIT_S = 60  # only a safety net: every wait below ends as soon as the state is reached


def _request(rng: np.random.Generator, rows: int = 1) -> tuple[InferenceRequest, np.ndarray, np.ndarray]:
    a = rng.integers(-1000, 1000, (rows, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (rows, 16), dtype=np.int32)
    return InferenceRequest("twice", inputs={"A": a, "B": b}), a, b


async def _answer(plane: DataPlane, rng: np.random.Generator, rows: int = 1) -> None:
    """One ensemble request whose answer must be exactly (2a, 2b)."""
    request, a, b = _request(rng, rows)
    response = await plane.infer(request)
    got = {o.name: o.data for o in response.outputs}
    np.testing.assert_array_equal(got["TWICE_A"], 2 * a)
    np.testing.assert_array_equal(got["TWICE_B"], 2 * b)


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(STATE_WAIT_S * 100):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never reached: {what}")


_GATES: list[threading.Event] = []  # opened when a test ends, so a failed test cannot hang its shutdown


def _hold(model: ModelVersion) -> threading.Event:
    """Make the model's only instance wait for the returned gate before each execution."""
    gate = threading.Event()
    _GATES.append(gate)
    instance = model.instances[0]
    compute = instance.compute

    def held(inputs, outputs):
        gate.wait()
        return compute(inputs, outputs)

    instance.compute = held  # type: ignore[method-assign]
    return gate


def _serve(repo: Path, test: Callable[[ModelManager, DataPlane], Awaitable[None]]) -> None:
    async def run() -> None:
        manager = ModelManager(repo, ControlMode.EXPLICIT, ["*"])
        await manager.start()
        try:
            await test(manager, DataPlane(manager))
        finally:
            for gate in _GATES:
                gate.set()
            _GATES.clear()
            await manager.stop()

    asyncio.run(run())


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    add_simple(tmp_path, "adder", extra_config="dynamic_batching { }\n")
    add_simple(tmp_path, "second", extra_config="dynamic_batching { }\n")
    add_ensemble(tmp_path, "twice", add_sub_twice(first="adder", second="second"))
    return tmp_path


def test_two_step_ensemble_answers_exactly(repo: Path) -> None:
    async def test(manager: ModelManager, plane: DataPlane) -> None:
        rng = np.random.default_rng(0)
        await asyncio.gather(*(_answer(plane, rng, rows) for rows in (1, 3, 8, 2)))
        assert manager.get("twice").platform == "ensemble"
        assert {row["name"]: row["state"] for row in manager.index()} == {
            "adder": "READY",
            "second": "READY",
            "twice": "READY",
        }

    _serve(repo, test)


def test_concurrent_ensemble_requests_share_a_step_batch(repo: Path) -> None:
    async def test(manager: ModelManager, plane: DataPlane) -> None:
        adder = manager.get("adder")
        gate = _hold(adder)
        rng = np.random.default_rng(1)
        first = asyncio.create_task(_answer(plane, rng))
        await _until(lambda: adder.scheduler.in_flight == 1 and adder.scheduler.queue_size == 0, "first executing")
        rest = [asyncio.create_task(_answer(plane, rng)) for _ in range(6)]
        await _until(lambda: adder.scheduler.queue_size == 6, "six requests queued behind it")
        gate.set()
        await asyncio.gather(first, *rest)
        adder_stats = plane.statistics("adder")[0]
        assert adder_stats["execution_count"] == 2  # the first alone, then the six queued ones together
        assert adder_stats["inference_count"] == 7
        assert [b["batch_size"] for b in adder_stats["batch_stats"]] == [1, 6]
        ensemble = plane.statistics("twice")[0]
        assert ensemble["inference_stats"]["success"]["count"] == 7
        assert ensemble["inference_count"] == 7
        assert ensemble["inference_stats"]["compute_infer"]["ns"] > 0
        assert plane.statistics("second")[0]["inference_count"] == 7

    _serve(repo, test)


def test_unloading_a_composing_model_under_load_gives_right_answers_or_clear_errors(repo: Path) -> None:
    async def test(manager: ModelManager, plane: DataPlane) -> None:
        second = manager.get("second")
        gate = _hold(second)
        rng = np.random.default_rng(2)
        held = [asyncio.create_task(_answer(plane, rng)) for _ in range(3)]
        await _until(lambda: second.scheduler.in_flight == 3, "three requests inside step 1")

        outcomes: list[str] = []
        stop = asyncio.Event()

        async def load() -> None:
            while not stop.is_set():
                try:
                    await _answer(plane, rng, 2)
                    outcomes.append("ok")
                except Unavailable as exc:
                    outcomes.append(exc.message)
                await asyncio.sleep(0)

        background = asyncio.create_task(load())
        unloading = asyncio.create_task(manager.unload("second"))
        await _until(lambda: ("second", "UNLOADING") in _states(manager), "second UNLOADING")
        with pytest.raises(Unavailable) as refused:
            await _answer(plane, rng)
        assert refused.value.message == (
            "ensemble 'twice' step 1 (model 'second') is not ready: "
            "Request for unknown model: 'second' has no available versions (version 1 UNLOADING (unloaded))"
        )
        assert ("twice", "UNAVAILABLE") in _states(manager)

        gate.set()  # the requests already inside step 1 finish, with right answers
        await asyncio.gather(*held)
        await unloading
        with pytest.raises(Unavailable) as refused:
            await _answer(plane, rng)
        assert refused.value.message.endswith("'second' has no available versions (version 1 UNAVAILABLE (unloaded))")

        await manager.load("second")
        assert ("twice", "READY") in _states(manager)
        before = outcomes.count("ok")
        await _until(lambda: outcomes.count("ok") >= before + 3, "answers again after the reload")
        stop.set()
        await background
        allowed = (
            "ensemble 'twice' step 1 (model 'second') is not ready: ",
            "ensemble 'twice' step 1 (model 'second'): model 'second:1' is unloading",
            # the step met the version unloading and its retry found none to replace it
            "ensemble 'twice' step 1 (model 'second'): Request for unknown model: 'second' has no available versions",
        )
        wrong = [o for o in outcomes if o != "ok" and not o.startswith(allowed)]
        assert not wrong

    _serve(repo, test)


def test_a_step_whose_model_is_replaced_mid_request_is_retried_on_the_new_version(repo: Path) -> None:
    """The ensemble resolves its steps once, as the request starts; 'second' is reloaded while the
    request is held inside step 0, so step 1 meets the retired version. As any request through the
    request path, the step is retried once on the version that replaced it, and answers."""

    async def test(manager: ModelManager, plane: DataPlane) -> None:
        adder, retired = manager.get("adder"), manager.get("second")
        gate = _hold(adder)
        request = asyncio.create_task(_answer(plane, np.random.default_rng(7), 2))
        await _until(lambda: adder.scheduler.in_flight == 1, "the request inside step 0")
        await manager.load("second")  # a new version replaces the one the request resolved
        replacement = manager.get("second")
        assert replacement is not retired
        gate.set()
        await request  # answers exactly (2a, 2b)
        assert plane.statistics("second")[0]["inference_count"] == 2  # the new version ran the step
        assert retired.stats.inference_count == 0

    _serve(repo, test)


def test_an_ocr_step_whose_model_is_replaced_mid_page_is_retried_on_the_new_version(tmp_path: Path) -> None:
    """The OCR model resolves its three models once, as the page starts; the recogniser is reloaded
    while the page is held in the detector, so the recognition steps meet the retired version and
    are retried once on the one that replaced it (the request path's retry): the page is read."""
    source = ocr.ensure_models()
    for model in (*ocr.MODELS, "ocr"):
        shutil.copytree(source / model, tmp_path / model)
    name = "page_left_crop"  # the cheapest page for the detector

    async def test(manager: ModelManager, plane: DataPlane) -> None:
        detector, retired = manager.get("text_detector"), manager.get("text_recognizer")
        gate = _hold(detector)
        page = InferenceRequest("ocr", inputs={"IMAGE": np.array([ocr.photos()[name]], dtype=object)})
        request = asyncio.create_task(plane.infer(page))
        await _until(lambda: detector.scheduler.in_flight == 1, "the page inside the detector")
        await manager.load("text_recognizer")
        assert manager.get("text_recognizer") is not retired
        gate.set()
        response = await request
        text = next(o.data for o in response.outputs if o.name == "text")
        assert [line.decode() for line in text] == [line["text"] for line in ocr.reference()[name]["ocr"]]
        assert retired.stats.inference_count == 0
        assert plane.statistics("text_recognizer")[0]["inference_count"] == len(text)

    _serve(tmp_path, test)


def test_unload_dependents_unloads_the_ensemble_too(repo: Path) -> None:
    async def test(manager: ModelManager, plane: DataPlane) -> None:
        await manager.unload("adder", unload_dependents=True)
        states = dict(_states(manager))
        assert states == {"adder": "UNAVAILABLE", "second": "READY", "twice": "UNAVAILABLE"}
        reasons = {row["name"]: row["reason"] for row in manager.index()}
        assert reasons["twice"] == "unloaded with 'adder' (unload_dependents)"
        await manager.load("adder")
        assert dict(_states(manager))["twice"] == "UNAVAILABLE"  # unloaded for good, as in Triton
        await manager.load("twice")
        await _answer(plane, np.random.default_rng(3))

    _serve(repo, test)


def test_loading_an_ensemble_loads_its_composing_models(tmp_path: Path) -> None:
    add_simple(tmp_path, "simple")
    add_ensemble(tmp_path, "twice", add_sub_twice())

    async def run() -> None:
        manager = ModelManager(tmp_path, ControlMode.EXPLICIT)
        await manager.start()
        try:
            await manager.load("twice")
            assert dict(_states(manager)) == {"simple": "READY", "twice": "READY"}
            await _answer(DataPlane(manager), np.random.default_rng(4), 5)
        finally:
            await manager.stop()

    asyncio.run(run())


def _states(manager: ModelManager) -> list[tuple[str, str]]:
    return [(row["name"], row.get("state", "")) for row in manager.index()]


def test_a_composing_model_reloaded_with_a_config_that_no_longer_fits(repo: Path) -> None:
    async def test(manager: ModelManager, plane: DataPlane) -> None:
        config = repo / "second" / "config.pbtxt"
        original = config.read_text()
        config.write_text(original.replace("max_batch_size: 8", "max_batch_size: 4"))
        await manager.load("second")
        with pytest.raises(Unavailable) as refused:
            await _answer(plane, np.random.default_rng(5))
        assert refused.value.message == (
            "ensemble 'twice' no longer fits its composing models: ensemble 'twice' "
            "has max_batch_size 8 but step 1 (model 'second') allows only 4"
        )
        config.write_text(original)
        await manager.load("second")
        await _answer(plane, np.random.default_rng(6), 8)

    _serve(repo, test)


def test_shutdown_drains_an_ensemble_request_through_its_later_steps(repo: Path) -> None:
    async def run() -> None:
        manager = ModelManager(repo, ControlMode.EXPLICIT, ["*"])
        await manager.start()
        plane = DataPlane(manager)
        adder, ensemble = manager.get("adder"), manager.get("twice")
        gate = _hold(adder)
        request = asyncio.create_task(_answer(plane, np.random.default_rng(7)))
        await _until(lambda: adder.scheduler.in_flight == 1, "the request inside step 0")
        stopping = asyncio.create_task(manager.stop())
        scheduler = ensemble.scheduler
        await _until(lambda: scheduler.in_flight == 1 and scheduler.closing, "the ensemble draining")
        gate.set()
        await request  # step 1 still took it: the composing models close after the ensembles
        await stopping

    asyncio.run(run())
