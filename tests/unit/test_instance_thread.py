"""The instance thread: a model instance's batches computed on one long-lived thread, answered on the loop."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from ferry.scheduling.instance_thread import InstanceThread
from ferry.scheduling.interface import Execution

from .test_scheduler import make, policy, request


async def test_calls_run_in_order_on_one_named_thread_and_answer_on_the_loop() -> None:
    thread = InstanceThread("ferry-model-m_0")
    seen: list[tuple[int, str, int]] = []

    def work(n: int) -> int:
        current = threading.current_thread()
        seen.append((n, current.name, current.ident or 0))
        return n * 10

    try:
        futures = [thread.compute(work, n) for n in range(5)]
        assert await asyncio.gather(*futures) == [0, 10, 20, 30, 40]
    finally:
        thread.stop()
    assert [n for n, _, _ in seen] == list(range(5))
    assert {name for _, name, _ in seen} == {"ferry-model-m_0"}
    assert len({ident for _, _, ident in seen}) == 1  # one long-lived thread, not one per call
    assert threading.main_thread().ident not in {ident for _, _, ident in seen}


async def test_an_exception_reaches_the_caller_and_the_thread_goes_on() -> None:
    thread = InstanceThread("t")

    def fail() -> None:
        raise ValueError("bad batch")

    try:
        with pytest.raises(ValueError, match="bad batch"):
            await thread.compute(fail)
        assert await thread.compute(lambda: 7) == 7
    finally:
        thread.stop()


async def test_a_cancelled_wait_neither_stops_the_call_nor_the_thread() -> None:
    thread = InstanceThread("t")
    gate, ran = threading.Event(), threading.Event()

    def held() -> str:
        gate.wait(10)
        ran.set()
        return "late"

    try:
        future = thread.compute(held)
        future.cancel()
        gate.set()
        assert await thread.compute(lambda: "next") == "next"  # the cancelled one's answer was dropped
        assert ran.is_set()
    finally:
        thread.stop()


async def test_stop_finishes_what_was_handed_over_then_ends_the_thread() -> None:
    thread = InstanceThread("t")
    gate = threading.Event()
    future = thread.compute(lambda: gate.wait(10) and "done")
    stopping = asyncio.get_running_loop().run_in_executor(None, thread.stop)
    gate.set()
    await stopping
    assert await future == "done"
    assert not any(t.name == "t" for t in threading.enumerate())


async def test_each_instance_computes_on_a_thread_of_its_own_which_stop_ends() -> None:
    scheduler, fakes = await make(policy(max_batch_size=4), instances=2)
    names: dict[str, set[str]] = {fake.spec.name: set() for fake in fakes}
    for fake in fakes:
        original = fake.compute

        def compute(inputs, outputs, original=original, name=fake.spec.name):  # type: ignore[no-untyped-def]
            names[name].add(threading.current_thread().name)
            return original(inputs, outputs)

        fake.compute = compute  # type: ignore[method-assign]
    for fake in fakes:
        fake.gate.clear()
    first = asyncio.ensure_future(scheduler.submit(Execution(request(1.0), ["y"], 1)))
    await asyncio.get_running_loop().run_in_executor(None, lambda: any(f.started.wait(10) for f in fakes))
    second = asyncio.ensure_future(scheduler.submit(Execution(request(2.0, width=4), ["y"], 1)))
    for fake in fakes:
        fake.gate.set()
    outputs = await asyncio.gather(first, second)
    np.testing.assert_array_equal(outputs[0]["y"], request(2.0)["x"])
    for _ in range(6):
        await scheduler.submit(Execution(request(3.0), ["y"], 1))
    await scheduler.stop()
    used = [threads for threads in names.values() if threads]
    assert used and all(len(threads) == 1 for threads in used)
    assert set().union(*used) <= {"ferry-model-m_0", "ferry-model-m_1"}
    assert not any(t.name.startswith("ferry-model-m") for t in threading.enumerate())
