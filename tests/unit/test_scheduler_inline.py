"""Batches of a model whose executions take microseconds run on the event loop's thread.

Each test causes "fast" or "slow": the threshold is patched per phase, and a slow execution burns
a fixed amount of its thread's CPU time, which a busy machine cannot shrink."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from ferry.backends.base import Instance, InstanceSpec, ModelIO
from ferry.errors import FerryError
from ferry.scheduling import scheduler as scheduling
from ferry.scheduling.interface import Execution
from ferry.scheduling.policy import SchedulingPolicy
from ferry.scheduling.scheduler import INLINE_AFTER_RUNS, Scheduler
from ferry.statistics import ModelStats


class ThreadRecordingInstance(Instance):
    """Doubles its input and records which thread ran each execution."""

    def __init__(self, inline_when_fast: bool) -> None:
        self.spec = InstanceSpec(name="i0", kind="CPU")
        self.io = ModelIO([], [])
        self.device = "cpu"
        self.inline_when_fast = inline_when_fast
        self.threads: list[int] = []
        self.rows: list[int] = []  # the batch size of each execution
        self.burn_cpu_ns = 0  # CPU time the next execution spends

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        self.threads.append(threading.get_ident())
        self.rows.append(len(inputs["x"]))
        started = time.thread_time_ns()
        while time.thread_time_ns() - started < self.burn_cpu_ns:
            pass
        self.burn_cpu_ns = 0
        if np.isnan(inputs["x"]).any():
            raise ValueError("NaN in input")
        return {"y": inputs["x"] * 2}

    def close(self) -> None:
        pass


async def _one(s: Scheduler, value: float = 1.0) -> np.ndarray:
    outputs = await s.submit(Execution({"x": np.full((1, 3), value, np.float32)}, ["y"], 1))
    return outputs["y"]


async def _scheduler(instance: ThreadRecordingInstance) -> Scheduler:
    s = Scheduler("m", [instance], ModelStats("m", "1"), SchedulingPolicy(max_batch_size=8))
    s.start()
    return s


async def test_fast_model_moves_to_the_loop_thread_and_back_when_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    instance = ThreadRecordingInstance(inline_when_fast=True)
    s = await _scheduler(instance)
    try:
        monkeypatch.setattr(scheduling, "INLINE_BELOW_NS", 10**12)  # every execution counts as fast
        for _ in range(INLINE_AFTER_RUNS):
            assert not s.computes_inline
            np.testing.assert_array_equal(await _one(s), np.full((1, 3), 2.0))
        assert loop_thread not in instance.threads  # measured on the pool first
        assert s.computes_inline
        np.testing.assert_array_equal(await _one(s), np.full((1, 3), 2.0))
        assert instance.threads[-1] == loop_thread

        monkeypatch.setattr(scheduling, "INLINE_BELOW_NS", 10_000_000)  # 10 ms
        for _ in range(scheduling.CPU_SAMPLE_EVERY):  # only sampled executions measure their CPU time
            instance.burn_cpu_ns = 100_000_000  # one measured execution of 100 ms lifts the average above 10 ms
            await _one(s)
            assert instance.threads[-1] == loop_thread
            if not s.computes_inline:
                break
        assert not s.computes_inline
        await _one(s)
        assert instance.threads[-1] != loop_thread  # back on the pool
    finally:
        await s.stop()


async def test_an_inline_failure_fails_only_its_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of four runs inline and fails on one NaN request: that request alone fails, the
    other three of the same batch are answered. The batcher waits for four (a preferred size with
    a minute's delay), so every execution here is a batch of four, not whatever timing gathered."""
    loop_thread = threading.get_ident()
    instance = ThreadRecordingInstance(inline_when_fast=True)
    s = Scheduler(
        "m",
        [instance],
        ModelStats("m", "1"),
        SchedulingPolicy(max_batch_size=8, dynamic=True, preferred_batch_sizes=(4,), max_queue_delay_ns=60 * 10**9),
    )
    s.start()
    try:
        monkeypatch.setattr(scheduling, "INLINE_BELOW_NS", 10**12)
        for _ in range(INLINE_AFTER_RUNS):
            await asyncio.wait_for(asyncio.gather(*(_one(s) for _ in range(4))), 30)
        assert s.computes_inline and instance.rows == [4] * INLINE_AFTER_RUNS
        values = [1.0, float("nan"), 3.0, 4.0]
        results = await asyncio.wait_for(asyncio.gather(*(_one(s, v) for v in values), return_exceptions=True), 30)
        assert instance.rows[INLINE_AFTER_RUNS] == 4 and instance.threads[INLINE_AFTER_RUNS] == loop_thread
        assert isinstance(results[1], FerryError) and "NaN in input" in results[1].message
        for value, result in zip(values, results, strict=True):
            if not np.isnan(value):
                np.testing.assert_array_equal(result, np.full((1, 3), 2 * value))
    finally:
        await s.stop()


async def test_an_instance_that_does_not_declare_it_never_computes_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    instance = ThreadRecordingInstance(inline_when_fast=False)
    s = await _scheduler(instance)
    try:
        monkeypatch.setattr(scheduling, "INLINE_BELOW_NS", 10**12)
        for _ in range(INLINE_AFTER_RUNS + 2):
            await _one(s)
        assert not s.computes_inline and loop_thread not in instance.threads
    finally:
        await s.stop()


async def test_a_much_larger_batch_than_measured_runs_on_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast model still sends an unusually large request to the pool: it must not stall the loop."""
    loop_thread = threading.get_ident()
    instance = ThreadRecordingInstance(inline_when_fast=True)
    s = await _scheduler(instance)
    try:
        monkeypatch.setattr(scheduling, "INLINE_BELOW_NS", 10**12)
        for _ in range(INLINE_AFTER_RUNS):
            await _one(s)
        assert s.computes_inline
        await _one(s)
        assert instance.threads[-1] == loop_thread
        big = np.ones((1, 3 * 1000), np.float32)  # 1000x the bytes of the measured executions
        outputs = await s.submit(Execution({"x": big}, ["y"], 1))
        np.testing.assert_array_equal(outputs["y"], big * 2)
        assert instance.threads[-1] != loop_thread
    finally:
        await s.stop()


class RowBurningInstance(ThreadRecordingInstance):
    """Spends a fixed CPU time per row of its input (an engine's cost grows with the batch)."""

    def __init__(self, per_row_ns: int) -> None:
        super().__init__(inline_when_fast=True)
        self.per_row_ns = per_row_ns

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        self.burn_cpu_ns = self.per_row_ns * len(inputs["x"])
        return super().compute(inputs, outputs)


async def test_a_lone_request_computes_inline_where_whole_batches_would_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """The expected CPU time is per item: after batches of 8 items at 4 ms each (32 ms an execution),
    a lone item (4 ms) runs on the loop's thread, while another 8 items still go to the pool."""
    loop_thread = threading.get_ident()
    instance = RowBurningInstance(per_row_ns=4_000_000)
    s = await _scheduler(instance)
    try:
        monkeypatch.setattr(scheduling, "INLINE_BELOW_NS", 10_000_000)
        eight = np.ones((8, 3), np.float32)
        for _ in range(INLINE_AFTER_RUNS):
            await s.submit(Execution({"x": eight}, ["y"], 8))
        assert loop_thread not in instance.threads
        np.testing.assert_array_equal(await _one(s), np.full((1, 3), 2.0))
        assert instance.threads[-1] == loop_thread
        await s.submit(Execution({"x": eight}, ["y"], 8))
        assert instance.threads[-1] != loop_thread
    finally:
        await s.stop()
