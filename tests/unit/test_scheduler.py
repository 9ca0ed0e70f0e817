"""Scheduler rules with a controllable fake instance (the real engine is tested in integration)."""

from __future__ import annotations

import asyncio
import mmap
import threading
import time
import weakref

import numpy as np
import pytest

from ferry.backends.base import Instance, InstanceSpec, ModelIO
from ferry.errors import FerryError, InvalidArgument, Unavailable
from ferry.scheduling import QueuePolicy, Scheduler, SchedulingPolicy, choose_batch
from ferry.scheduling import scheduler as scheduling
from ferry.scheduling.interface import Execution
from ferry.scheduling.scheduler import Staging, StagingBudget, assemble
from ferry.statistics import ModelStats

#: A batch decision: the item counts of the compatible queued requests (oldest first), and how many
#: of them the batcher runs now (None: it waits for more).
Decision = tuple[list[int], int | None]


class GatedInstance(Instance):
    """Doubles its input; waits for ``gate`` before each run; records every batch it ran."""

    def __init__(self, name: str = "fake") -> None:
        self.spec = InstanceSpec(name=name, kind="CPU")
        self.io = ModelIO([], [])
        self.device = "cpu"
        self.gate = threading.Event()
        self.gate.set()
        self.batches: list[np.ndarray] = []
        self.started = threading.Event()

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        self.started.set()
        self.gate.wait(10)
        x = inputs["x"]
        self.batches.append(x.copy())
        if np.isnan(x).any():
            raise ValueError("NaN in input")
        return {"y": x * 2}

    def close(self) -> None:
        pass


def policy(**kwargs) -> SchedulingPolicy:
    base = {"max_batch_size": 8, "dynamic": True}
    base.update(kwargs)
    return SchedulingPolicy(**base)


async def make(p: SchedulingPolicy, instances: int = 1) -> tuple[Scheduler, list[GatedInstance]]:
    fakes = [GatedInstance(f"i{n}") for n in range(instances)]
    scheduler = Scheduler("m", fakes, ModelStats("m", "1"), p)
    scheduler.start()
    return scheduler, fakes


def request(value: float, rows: int = 1, width: int = 3) -> dict[str, np.ndarray]:
    return {"x": np.full((rows, width), value, dtype=np.float32)}


async def submit(s: Scheduler, value: float, rows: int = 1, width: int = 3, **kwargs):
    return await s.submit(Execution(request(value, rows, width), ["y"], rows, **kwargs))


async def until(condition, timeout: float = 10.0) -> None:
    """Wait for a scheduler state instead of guessing how long a loaded machine takes to get there."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def wait_started(instance: GatedInstance) -> None:
    while not instance.started.is_set():
        await asyncio.sleep(0.001)


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> list[Decision]:
    """Every batch decision the scheduler takes, in order: what it decided, not how long it took."""
    made: list[Decision] = []

    def recorded(sizes, p: SchedulingPolicy, oldest_wait_ns: int) -> int | None:
        count = choose_batch(sizes, p, oldest_wait_ns)
        made.append((list(sizes), count))
        return count

    monkeypatch.setattr(scheduling, "choose_batch", recorded)
    return made


class StoppableClock:
    """The scheduler's clock (its ``time`` module): the real one until ``stop_at`` makes it stand
    still, so how long a request has waited is what the test says, however busy the machine is.
    (A request's arrival is still stamped by the real clock.)"""

    def __init__(self) -> None:
        self.stopped_ns: int | None = None

    def stop_at(self, ns: int) -> None:
        self.stopped_ns = ns

    def perf_counter_ns(self) -> int:
        return time.perf_counter_ns() if self.stopped_ns is None else self.stopped_ns

    def thread_time_ns(self) -> int:
        return time.thread_time_ns()


# --- the pure batch-size rule ---------------------------------------------------------------


def test_choose_batch_rules() -> None:
    no_delay = policy()
    assert choose_batch([1, 1, 1], no_delay, 0) == 3  # no delay configured: send what is queued
    assert choose_batch([4, 4, 4], no_delay, 0) == 2  # never over max_batch_size (items, not requests)
    delayed = policy(max_queue_delay_ns=1_000_000)
    assert choose_batch([1, 1], delayed, 0) is None  # wait for more ...
    assert choose_batch([1, 1], delayed, 1_000_000) == 2  # ... but not past the delay
    assert choose_batch([4, 4], delayed, 0) == 2  # a full batch goes at once
    preferred = policy(preferred_batch_sizes=(2, 4), max_queue_delay_ns=10**9)
    assert choose_batch([1], preferred, 0) is None
    assert choose_batch([1, 1], preferred, 0) == 2  # a preferred size goes at once
    assert choose_batch([2, 1, 1, 1], preferred, 0) == 3  # the largest preferred prefix (4 items)
    assert choose_batch([1], SchedulingPolicy(max_batch_size=8), 0) == 1  # no dynamic batching


def test_policy_from_config() -> None:
    from google.protobuf import text_format

    from ferry_client.protocol import model_config_pb2 as mc

    config = text_format.Parse(
        "max_batch_size: 16 dynamic_batching { preferred_batch_size: [8, 4] max_queue_delay_microseconds: 250 "
        "priority_levels: 3 default_priority_level: 2 default_queue_policy { max_queue_size: 10 "
        "default_timeout_microseconds: 1000 timeout_action: DELAY } priority_queue_policy { key: 1 value { "
        "max_queue_size: 2 allow_timeout_override: true } } }",
        mc.ModelConfig(),
    )
    p = SchedulingPolicy.from_config(config)
    assert p.preferred_batch_sizes == (4, 8) and p.max_queue_delay_ns == 250_000
    assert p.levels == [1, 2, 3] and p.level_for(None) == 2 and p.level_for(3) == 3
    assert p.policy_for(2) == QueuePolicy(10, 1_000_000, False, True)
    assert p.policy_for(1).max_queue_size == 2 and p.policy_for(1).timeout_ns(50) == 50_000
    with pytest.raises(InvalidArgument, match="priority 4 is outside 1..3"):
        p.level_for(4)
    assert not SchedulingPolicy.from_config(mc.ModelConfig(max_batch_size=4)).dynamic


# --- the scheduler ----------------------------------------------------------------------------


async def test_batches_form_under_concurrency_and_split_correctly() -> None:
    s, (fake,) = await make(policy())
    fake.gate.clear()
    first = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    others = [asyncio.create_task(submit(s, v, rows=r)) for v, r in ((1, 1), (2, 2), (3, 1), (4, 3))]
    await until(lambda: s.queue_size == 4)
    fake.gate.set()
    results = await asyncio.gather(first, *others)
    assert [b.shape[0] for b in fake.batches] == [1, 7]  # 1+2+1+3 items in one execution
    for (value, rows), result in zip(((0, 1), (1, 1), (2, 2), (3, 1), (4, 3)), results, strict=True):
        np.testing.assert_array_equal(result["y"], np.full((rows, 3), value * 2, dtype=np.float32))
    stats = s.stats.as_dict()
    assert stats["execution_count"] == 2 and stats["inference_count"] == 8
    assert stats["inference_stats"]["success"]["count"] == 5  # counted with their batches
    assert [b["batch_size"] for b in stats["batch_stats"]] == [1, 7]
    await s.stop()


class BufferedInstance(GatedInstance):
    """Offers its own memory for batch assembly (backends.base.Instance.input_buffer), as a GPU instance does."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = np.zeros(64, dtype=np.float32)
        self.asked: list[tuple[str, tuple[int, ...], np.dtype]] = []
        self.assembled_in_place: list[bool] = []

    def input_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype, slot: int = 0) -> np.ndarray | None:
        self.asked.append((name, shape, dtype))
        return self.memory[: int(np.prod(shape))].reshape(shape)

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        self.assembled_in_place.append(np.shares_memory(inputs["x"], self.memory))
        return super().compute(inputs, outputs)


async def test_batches_are_assembled_in_the_instance_buffer() -> None:
    fake = BufferedInstance()
    s = Scheduler("m", [fake], ModelStats("m", "1"), policy())
    s.start()
    fake.gate.clear()
    first = asyncio.create_task(submit(s, 1))
    await wait_started(fake)
    others = [asyncio.create_task(submit(s, v, rows=r)) for v, r in ((2, 2), (3, 1))]
    await until(lambda: s.queue_size == 2)
    fake.gate.set()
    results = await asyncio.gather(first, *others)
    # A single request runs on its own memory; a batch of several is concatenated into the buffer.
    assert fake.assembled_in_place == [False, True]
    assert fake.asked == [("x", (3, 3), np.dtype(np.float32))]
    for (value, rows), result in zip(((1, 1), (2, 2), (3, 1)), results, strict=True):
        np.testing.assert_array_equal(result["y"], np.full((rows, 3), value * 2, dtype=np.float32))
    await s.stop()


class KeepingInstance(GatedInstance):
    """Keeps every batch it was given (not a copy) and answers with a view of its input, as an
    engine returning an input unchanged may."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[np.ndarray] = []

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        self.started.set()
        self.gate.wait(10)
        self.given.append(inputs["x"])
        return {"y": inputs["x"][:, :1]}


async def _two_batches(s: Scheduler, fake: GatedInstance) -> list:
    """Two batches of three, one after the other (each gathered while a lone request runs)."""
    answers = []
    for values in ((1, 2, 3), (4, 5, 6)):
        fake.gate.clear()
        fake.started.clear()
        blocker = asyncio.create_task(submit(s, -1))
        await wait_started(fake)
        batch = [asyncio.create_task(submit(s, v)) for v in values]
        await until(lambda: s.queue_size == len(values))  # noqa: B023 (awaited within this iteration)
        fake.gate.set()
        await blocker
        answers += await asyncio.gather(*batch)
    return answers


async def test_batches_are_gathered_in_memory_kept_from_batch_to_batch() -> None:
    # a fresh buffer per batch is a fresh mapping for ResNet-sized batches (page faults every batch):
    # the second batch of three lands in the very memory the first one was gathered in
    fake = KeepingInstance()
    s = Scheduler("m", [fake], ModelStats("m", "1"), policy())
    s.start()
    answers = await _two_batches(s, fake)
    gathered = [x for x in fake.given if len(x) == 3]
    assert len(gathered) == 2 and np.shares_memory(gathered[0], gathered[1])
    # the answers were copied out of that memory before the next batch overwrote it
    assert [float(a["y"][0, 0]) for a in answers] == [1, 2, 3, 4, 5, 6]
    await s.stop()


def test_staging_memory_is_bounded_for_the_whole_process() -> None:
    budget = StagingBudget(1024)
    one, two = Staging(budget), Staging(budget)
    small = one.provide("x", (4, 32), np.dtype(np.float32))  # 512 bytes
    assert small is not None and small.shape == (4, 32)
    assert one.provide("x", (9, 32), np.dtype(np.float32)) is None  # 1,152 bytes: fresh memory instead
    assert two.provide("x", (4, 32), np.dtype(np.float32)) is not None  # 512 + 512: within the bound
    assert two.provide("y", (1, 8), np.dtype(np.float32)) is None  # another instance's count too
    assert one.provide("b", (2,), np.dtype(object)) is None  # BYTES are Python objects: never staged
    one.close()  # its model unloaded: the memory is free for others
    assert two.provide("y", (1, 8), np.dtype(np.float32)) is not None
    two.close()
    assert budget.held == 0


async def test_idle_request_runs_without_waiting(decisions: list[Decision]) -> None:
    s, (fake,) = await make(policy())
    await asyncio.wait_for(submit(s, 1), 30)  # a hang guard only
    assert decisions == [([1], 1)]  # its one decision: run it now, never "wait for more"
    await s.stop()


async def test_queue_delay_is_bounded_from_the_oldest_request(
    monkeypatch: pytest.MonkeyPatch, decisions: list[Decision]
) -> None:
    """The clock stops at the moment the first request's delay is up, with the second one's still
    to run: the second joins the first's batch, which goes at once. Measured from the newest
    request, the batcher would decide to wait (and, waited out, the delay is a minute)."""
    delay_ns = 60 * 10**9
    clock = StoppableClock()
    monkeypatch.setattr(scheduling, "time", clock)
    s, (fake,) = await make(policy(max_queue_delay_ns=delay_ns))
    a = asyncio.create_task(submit(s, 1))
    await until(lambda: len(decisions) == 1)
    assert decisions == [([1], None)]  # the first request alone waits for the delay
    clock.stop_at(time.perf_counter_ns() + delay_ns)  # after the first request's arrival, before the second's
    b = asyncio.create_task(submit(s, 2))
    await until(lambda: len(decisions) == 2)
    assert decisions[1] == ([1, 1], 2)  # the oldest request's delay is up: both go now
    await asyncio.wait_for(asyncio.gather(a, b), 30)
    assert [x.shape[0] for x in fake.batches] == [2]
    await s.stop()


async def test_preferred_size_goes_without_waiting_for_the_delay() -> None:
    s, (fake,) = await make(policy(preferred_batch_sizes=(4,), max_queue_delay_ns=60_000_000_000))
    # a minute's delay: waiting for it would run far past the 30 s bound
    await asyncio.wait_for(asyncio.gather(*(submit(s, v) for v in range(4))), timeout=30)
    assert [b.shape[0] for b in fake.batches] == [4]
    await s.stop()


async def test_full_queue_is_rejected_at_once() -> None:
    s, (fake,) = await make(policy(queue_policies={1: QueuePolicy(max_queue_size=2)}))
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    queued = [asyncio.create_task(submit(s, v)) for v in (1, 2)]
    await until(lambda: s.queue_size == 2)
    with pytest.raises(Unavailable, match=r"exceeds maximum queue size \(2 at priority level 1\)"):
        await asyncio.wait_for(submit(s, 3), 1)  # immediate, while the instance is still blocked
    fake.gate.set()
    await asyncio.gather(running, *queued)
    assert s.stats.failures == {"REJECTED": 1}
    await s.stop()


async def test_timeout_rejects_promptly_while_the_instance_is_busy() -> None:
    s, (fake,) = await make(policy(queue_policies={1: QueuePolicy(default_timeout_ns=100_000_000)}))
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    with pytest.raises(Unavailable, match="timed out after"):
        await asyncio.wait_for(submit(s, 1), 30)  # a hang guard only
    assert fake.batches == [] and not fake.gate.is_set()  # rejected while the instance is still busy
    fake.gate.set()
    await running
    assert len(fake.batches) == 1  # the timed-out request never ran
    await s.stop()


async def test_timeout_override_only_when_allowed() -> None:
    strict = QueuePolicy(default_timeout_ns=0, allow_timeout_override=False)
    assert strict.timeout_ns(5) == 0
    assert QueuePolicy(allow_timeout_override=True).timeout_ns(5) == 5000
    s, (fake,) = await make(policy(queue_policies={1: QueuePolicy(allow_timeout_override=True)}))
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    with pytest.raises(Unavailable, match="timed out"):
        await submit(s, 1, timeout_us=50_000)
    fake.gate.set()
    await running
    await s.stop()


async def test_delay_action_moves_timed_out_requests_behind() -> None:
    p = policy(max_batch_size=1, queue_policies={1: QueuePolicy(default_timeout_ns=50_000_000, delay_on_timeout=True)})
    s, (fake,) = await make(p)
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    late = asyncio.create_task(submit(s, 1))
    await until(lambda: any(p.delayed for q in s._queues.values() for p in q))
    fresh = asyncio.create_task(submit(s, 2))
    await until(lambda: any(p.queued and not p.delayed for q in s._queues.values() for p in q))
    fake.gate.set()
    await asyncio.gather(running, late, fresh)
    assert [float(b[0, 0]) for b in fake.batches] == [0.0, 2.0, 1.0]
    await s.stop()


async def test_priorities_are_ordered() -> None:
    s, (fake,) = await make(
        policy(
            max_batch_size=1, priority_levels=2, default_priority=2, queue_policies={1: QueuePolicy(), 2: QueuePolicy()}
        )
    )
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    low = [asyncio.create_task(submit(s, v)) for v in (1, 2)]
    await until(lambda: s.queue_size == 2)
    high = [asyncio.create_task(submit(s, v, priority=1)) for v in (3, 4)]
    await until(lambda: s.queue_size == 4)
    fake.gate.set()
    await asyncio.gather(running, *low, *high)
    assert [float(b[0, 0]) for b in fake.batches] == [0.0, 3.0, 4.0, 1.0, 2.0]
    await s.stop()


async def test_shape_incompatible_requests_are_not_mixed() -> None:
    s, (fake,) = await make(policy())
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    tasks = [asyncio.create_task(submit(s, v, width=w)) for v, w in ((1, 3), (2, 4), (3, 3), (4, 4))]
    await until(lambda: s.queue_size == 4)
    fake.gate.set()
    results = await asyncio.gather(running, *tasks)
    assert sorted(b.shape for b in fake.batches[1:]) == [(2, 3), (2, 4)]
    assert [r["y"].shape for r in results] == [(1, 3), (1, 3), (1, 4), (1, 3), (1, 4)]
    await s.stop()


async def test_cancelled_requests_are_dropped_before_running() -> None:
    s, (fake,) = await make(policy())
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    doomed = asyncio.create_task(submit(s, 99))
    kept = asyncio.create_task(submit(s, 1))
    await until(lambda: s.queue_size == 2)
    doomed.cancel()
    await until(lambda: s.queue_size == 1)  # the cancelled one left the queue
    fake.gate.set()
    await asyncio.gather(running, kept)
    assert 99.0 not in np.concatenate([b.reshape(-1) for b in fake.batches])
    assert s.stats.failures == {"CANCELED": 1}
    await s.stop()


async def test_a_cancelled_queued_request_lets_go_of_its_inputs_at_once() -> None:
    """The queue forgets a cancelled request lazily; its tensors (views of an intake's arena that
    died, say) must not wait for that."""
    s, (fake,) = await make(policy())
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    kept = asyncio.create_task(submit(s, 1))  # ahead of the doomed one: the queue's head stays live
    inputs = request(99)
    gone = weakref.ref(inputs["x"])
    doomed = s.enqueue(Execution(inputs, ["y"], 1))
    del inputs
    await until(lambda: s.queue_size == 2)
    doomed.cancel()
    await until(lambda: s.queue_size == 1)
    assert gone() is None  # released while its entry still sits in the queue
    fake.gate.set()
    await asyncio.gather(running, kept)
    assert s.stats.failures == {"CANCELED": 1}
    await s.stop()


async def test_one_bad_request_fails_alone() -> None:
    s, (fake,) = await make(policy())
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    tasks = [asyncio.create_task(submit(s, v)) for v in (1.0, float("nan"), 3.0)]
    await until(lambda: s.queue_size == 3)
    fake.gate.set()
    results = await asyncio.gather(running, *tasks, return_exceptions=True)
    assert isinstance(results[2], FerryError) and "NaN in input" in results[2].message
    for index in (0, 1, 3):
        assert isinstance(results[index], dict)
    np.testing.assert_array_equal(results[3]["y"], np.full((1, 3), 6.0, np.float32))
    await s.stop()


async def test_requests_spread_over_instances() -> None:
    s, fakes = await make(SchedulingPolicy(max_batch_size=8), instances=2)
    for fake in fakes:
        fake.gate.clear()
    tasks = [asyncio.create_task(submit(s, v)) for v in range(2)]
    for fake in fakes:
        await asyncio.wait_for(wait_started(fake), 2)  # both instances busy at once
    for fake in fakes:
        fake.gate.set()
    await asyncio.gather(*tasks)
    assert all(len(f.batches) == 1 for f in fakes)
    await s.stop()


async def test_stop_drains_queued_requests_then_refuses() -> None:
    s, (fake,) = await make(policy(max_batch_size=1))
    fake.gate.clear()
    tasks = [asyncio.create_task(submit(s, v)) for v in range(3)]
    await wait_started(fake)
    stopping = asyncio.create_task(s.stop(timeout=5))
    await asyncio.sleep(0)  # one turn of the loop: stop() has begun
    with pytest.raises(Unavailable, match="unloading"):
        await submit(s, 9)
    fake.gate.set()
    await stopping
    assert all(t.done() and not t.exception() for t in tasks)


async def test_stop_runs_requests_held_for_a_preferred_size_at_once() -> None:
    """Nothing can join a batch once unloading starts, so the batcher stops waiting out the delay."""
    s, (fake,) = await make(policy(preferred_batch_sizes=(8,), max_queue_delay_ns=600 * 10**9))
    tasks = [asyncio.create_task(submit(s, v)) for v in range(3)]
    await until(lambda: s.queue_size == 3)
    await asyncio.wait_for(s.stop(), timeout=60)  # far below the ten-minute delay
    assert [x.shape[0] for x in fake.batches] == [3]
    assert [t.result()["y"][0, 0] for t in tasks] == [0, 2, 4]


async def test_an_execution_and_its_queued_request_are_slotted() -> None:
    """The hot path's per-request objects carry no ``__dict__``, and the batcher keeps the
    submitted ``Execution`` itself on its queued request instead of copying its fields."""
    execution = Execution(request(1.0), ["y"], 1)
    pending = scheduling.Pending(execution, 1, (), 0, asyncio.get_running_loop().create_future())
    assert not hasattr(execution, "__dict__") and not hasattr(pending, "__dict__")
    assert pending.execution is execution


def test_a_batch_whose_parts_follow_one_another_in_one_buffer_is_joined_without_a_copy() -> None:
    """Consecutive blocks of an intake's arena: the batch is a view of them, not a gather."""
    arena = mmap.mmap(-1, 4096)
    parts = [np.ndarray((1, 4), np.float32, buffer=arena, offset=16 * i) for i in range(4)]
    for value, part in enumerate(parts):
        part[:] = value
    offered: list[tuple[int, ...]] = []

    def provide(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        offered.append(shape)
        return np.empty(shape, dtype)

    joined = assemble(parts[:3], "x", provide)
    assert joined.ctypes.data == parts[0].ctypes.data and offered == []  # no gather
    np.testing.assert_array_equal(joined, [[0] * 4, [1] * 4, [2] * 4])
    assert not joined.flags.writeable
    with_a_gap = assemble([parts[0], parts[2]], "x", provide)  # not one after the other: gathered
    assert offered == [(2, 4)] and not np.shares_memory(with_a_gap, parts[0])
    np.testing.assert_array_equal(with_a_gap, [[0] * 4, [2] * 4])
    elsewhere = np.ones((1, 4), np.float32)  # another buffer, whatever its address
    assert not np.shares_memory(assemble([parts[3], elsewhere], "x", provide), parts[3])
