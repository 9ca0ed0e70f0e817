"""A request's parameters reach every scheduler that runs it on the ``Execution`` it submits (issue
40, item 4: no context variable carries them): the model's own, and each step's of an ensemble, as
Triton hands an ensemble's parameters to its composing models. In-process, real ONNX models."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferry.api.dataplane import DataPlane
from ferry.repository.manager import ControlMode, ModelManager
from ferry.scheduling import ModelScheduler
from ferry.scheduling.interface import Execution
from ferry.types import InferenceRequest

from ..ensembles.repo import add_ensemble, add_simple, add_sub_twice

WANTED = {"temperature": 0.5, "user": "ann"}


def _recorded(scheduler: ModelScheduler, monkeypatch: pytest.MonkeyPatch) -> list[Mapping[str, Any] | None]:
    """The parameters of every execution submitted to ``scheduler`` from now on."""
    seen: list[Mapping[str, Any] | None] = []
    submit = scheduler.submit

    async def recording(execution: Execution) -> Any:
        seen.append(execution.parameters)
        return await submit(execution)

    monkeypatch.setattr(scheduler, "submit", recording)
    return seen


@pytest.mark.asyncio
async def test_parameters_travel_on_every_submitted_execution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_simple(tmp_path, "adder")
    add_ensemble(tmp_path, "twice", add_sub_twice(model="adder"))
    manager = ModelManager(tmp_path, ControlMode.EXPLICIT, ["twice"])
    await manager.start()
    try:
        plane = DataPlane(manager)
        steps = _recorded(manager.get("adder").scheduler, monkeypatch)
        ensemble = _recorded(manager.get("twice").scheduler, monkeypatch)
        a = np.arange(16, dtype=np.int32)[None]
        request = InferenceRequest("twice", inputs={"A": a, "B": a}, parameters={**WANTED, "priority": 1})
        response = await plane.infer(request)
        np.testing.assert_array_equal(response.outputs[0].data, 2 * a)
        direct = InferenceRequest("adder", inputs={"INPUT0": a, "INPUT1": a}, parameters=WANTED)
        await plane.infer(direct)
    finally:
        await manager.stop()
    assert [dict(p or {}) for p in ensemble] == [{**WANTED, "priority": 1}]
    assert [dict(p or {}) for p in steps] == [{**WANTED, "priority": 1}] * 2 + [WANTED]
