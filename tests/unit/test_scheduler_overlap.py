"""The batcher with an instance that overlaps batches (``Instance.overlaps_batches``: a GPU's launch and
finish): the next batch is launched before the current one finishes, two at most, answered in order.

The fake computes a batch only in ``finish``, from the very array ``launch`` was given, as a device
reads its input buffer after the launch returned: a buffer the next batch was assembled in would
give the earlier batch the later one's answers."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from ferry.backends.base import Instance, InstanceSpec, ModelIO
from ferry.errors import FerryError
from ferry.scheduling import Scheduler, SchedulingPolicy
from ferry.scheduling.interface import Execution
from ferry.scheduling.scheduler import Unloading
from ferry.scheduling.timeline import Timeline
from ferry.statistics import ModelStats

from .test_scheduler import until

#: A hang guard for the fake's gates, never a wait the test relies on.
GATE_SECS = 10


class PipelinedInstance(Instance):
    """``launch`` records the batch's input as given (no copy) and its buffer set; ``finish`` doubles
    it then. ``launch_gate`` holds every launch; ``hold(n)`` holds the finish of the n-th launch."""

    overlaps_batches = True

    def __init__(self, offers_buffer: bool = True) -> None:
        self.spec = InstanceSpec(name="pipelined", kind="GPU")
        self.io = ModelIO([], [])
        self.device = "fake:0"
        self.offers_buffer = offers_buffer
        self.memory = [np.zeros(64, dtype=np.float32) for _ in range(2)]  # one per buffer set
        self.launch_gate = threading.Event()
        self.launch_gate.set()
        self.tried: list[list[float]] = []  # each launch's values, as it began (a refused one too)
        self.given: list[tuple[int, np.ndarray]] = []  # (slot, the input as launched)
        self.in_flight_at_launch: list[int] = []  # batches launched and not finished, before each launch
        self.finishing: list[int] = []  # the launches whose finish began, in order
        self.finished = 0
        self._holds: dict[int, threading.Event] = {}

    def hold(self, launch: int) -> threading.Event:
        """The gate the finish of the ``launch``-th launch waits for (set it to let it finish)."""
        return self._holds.setdefault(launch, threading.Event())

    def input_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype, slot: int = 0) -> np.ndarray | None:
        if not self.offers_buffer:
            return None
        return self.memory[slot][: int(np.prod(shape))].reshape(shape)

    def launch(
        self, inputs: dict[str, np.ndarray], outputs: list[str], slot: int = 0, kept: frozenset[str] = frozenset()
    ) -> int:
        x = inputs["x"]
        self.tried.append([float(v) for v in x[:, 0]])
        self.launch_gate.wait(GATE_SECS)
        if np.isinf(x).any():
            raise ValueError("inf refused at launch")
        self.in_flight_at_launch.append(len(self.given) - self.finished)
        self.given.append((slot, x))
        return len(self.given) - 1

    def finish(self, launched: int) -> dict[str, np.ndarray]:
        self.finishing.append(launched)
        if launched in self._holds:
            self._holds[launched].wait(GATE_SECS)
        x = self.given[launched][1]
        self.finished += 1
        if np.isnan(x).any():
            raise ValueError("NaN in input")
        return {"y": x * 2}

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        return self.finish(self.launch(inputs, outputs))

    def close(self) -> None:
        pass


def start(fake: PipelinedInstance, **policy: object) -> Scheduler:
    settings: dict = {"max_batch_size": 2, "dynamic": True}
    settings.update(policy)
    scheduler = Scheduler("m", [fake], ModelStats("m", "1"), SchedulingPolicy(**settings))
    scheduler.start()
    return scheduler


def send(s: Scheduler, value: float, timeline: Timeline | None = None) -> asyncio.Future:
    return s.enqueue(Execution({"x": np.full((1, 3), value, dtype=np.float32)}, ["y"], 1, timeline=timeline))


async def held_launch(
    s: Scheduler, fake: PipelinedInstance, values: list[float], timelines: list[Timeline] | None = None
) -> list[asyncio.Future]:
    """A lone request whose launch is held while ``values`` are queued behind it, so the batches after
    it are there to be formed the moment its launch returns (``timelines``: one per request, traced)."""
    traced = timelines or [None] * (1 + len(values))
    fake.launch_gate.clear()
    first = send(s, -1, traced[0])
    await until(lambda: len(fake.tried) == 1)
    queued = [send(s, value, timeline) for value, timeline in zip(values, traced[1:], strict=True)]
    await until(lambda: s.queue_size == len(values))
    fake.launch_gate.set()
    return [first, *queued]


def answered(results: list[dict[str, np.ndarray]]) -> list[float]:
    return [float(result["y"][0, 0]) for result in results]


async def test_the_next_batch_is_launched_before_the_current_one_finishes_two_at_most() -> None:
    fake = PipelinedInstance()
    fake.hold(0)
    s = start(fake)
    timelines = [Timeline() for _ in range(4)]
    futures = await held_launch(s, fake, [1, 2, 3], timelines)  # batches [-1], [1, 2], [3]
    await until(lambda: fake.finishing == [0])  # the first batch's finish has begun and is held
    assert len(fake.given) == 2 and fake.finished == 0  # the second was launched before the first finished
    assert s.queue_size == 1  # the third waits: two batches in flight at most
    fake.hold(0).set()
    assert answered(await asyncio.wait_for(asyncio.gather(*futures), 30)) == [-2, 2, 4, 6]
    assert [slot for slot, _ in fake.given] == [0, 1, 0]  # buffer sets in turn
    assert fake.in_flight_at_launch == [0, 1, 1]
    assert [b["batch_size"] for b in s.stats.as_dict()["batch_stats"]] == [1, 2]
    stats = s.stats.as_dict()
    assert stats["execution_count"] == 3 and stats["inference_stats"]["compute_infer"]["count"] == 4
    for timeline in timelines:
        stages = (timeline.compute_start, timeline.compute_input_end, timeline.compute_output_start)
        assert 0 < timeline.queue_start <= stages[0] <= stages[1] <= stages[2] <= timeline.compute_end
    first, second = timelines[0], timelines[1]
    assert second.compute_start < first.compute_end  # the timelines show the two batches overlapping
    await s.stop()


@pytest.mark.parametrize("offers_buffer", [True, False], ids=["instance-buffer", "scheduler-staging"])
async def test_two_batches_in_flight_are_assembled_in_distinct_memory(offers_buffer: bool) -> None:
    """[1, 2] is launched in set 1 and still in flight when [3, 4] is assembled in set 0: each in its
    own memory (the instance's pinned buffer, or the scheduler's staging, one per set)."""
    fake = PipelinedInstance(offers_buffer)
    s = start(fake)
    futures = await held_launch(s, fake, [1, 2, 3, 4])
    assert answered(await asyncio.wait_for(asyncio.gather(*futures), 30)) == [-2, 2, 4, 6, 8]
    (_, alone), (first_set, first), (second_set, second) = fake.given
    assert (first_set, second_set) == (1, 0) and fake.in_flight_at_launch == [0, 1, 1]
    assert not np.shares_memory(first, second)
    if offers_buffer:
        assert np.shares_memory(first, fake.memory[1]) and np.shares_memory(second, fake.memory[0])
    await s.stop()


@pytest.mark.parametrize("fails_at", ["launch", "finish"])
async def test_a_failed_batch_fails_only_its_bad_request_and_answers_stay_in_order(fails_at: str) -> None:
    fake = PipelinedInstance()
    s = start(fake)
    bad = float("inf") if fails_at == "launch" else float("nan")
    futures = await held_launch(s, fake, [1, bad, 3, 4])  # batches [-1], [1, bad], [3, 4]
    order: list[int] = []
    for index, future in enumerate(futures):
        future.add_done_callback(lambda _, index=index: order.append(index))
    results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 30)
    assert isinstance(results[2], FerryError)
    assert ("inf refused" if fails_at == "launch" else "NaN in input") in results[2].message
    assert answered([results[i] for i in (0, 1, 3, 4)]) == [-2, 2, 6, 8]
    assert order == [0, 1, 2, 3, 4]
    # [3, 4] was launched while [1, bad] was in flight; the failed batch is re-run request by request
    # once [3, 4] is finished: nothing else is in flight meanwhile
    assert repr(fake.tried) == repr([[-1.0], [1.0, bad], [3.0, 4.0], [1.0], [bad]])  # NaN != NaN
    assert fake.in_flight_at_launch[-1] == 0
    assert s.stats.failures == {"BACKEND": 1}
    await s.stop()


async def test_a_second_batch_is_launched_only_if_it_can_go_now() -> None:
    """One that would wait out the queue delay is not launched (the batch in flight is finished
    instead); once the server hurries (draining) it can go now, and is launched early."""
    fake = PipelinedInstance()
    fake.hold(0)
    fake.hold(1)
    s = start(fake, preferred_batch_sizes=(2,), max_queue_delay_ns=600 * 10**9)  # ten minutes
    fake.launch_gate.clear()
    futures = [send(s, 1), send(s, 2)]  # a preferred size: goes at once
    await until(lambda: len(fake.tried) == 1)
    futures.append(send(s, 3))  # alone, it would wait for the delay
    await until(lambda: s.queue_size == 1)
    fake.launch_gate.set()
    await until(lambda: fake.finishing == [0])  # the worker finishes [1, 2] instead of waiting
    assert fake.tried == [[1, 2]] and s.queue_size == 1
    fake.launch_gate.clear()
    fake.hold(0).set()
    futures.append(send(s, 4))  # [3, 4]: a preferred size
    await until(lambda: len(fake.tried) == 2)
    futures.append(send(s, 5))  # alone again
    await until(lambda: s.queue_size == 1)
    s.hurry()  # draining: nobody waits for more, so [5] can go now
    fake.launch_gate.set()
    await until(lambda: fake.finishing == [0, 1])
    assert fake.tried == [[1, 2], [3, 4], [5]]  # [5] was launched before [3, 4] finished
    fake.hold(1).set()
    assert answered(await asyncio.wait_for(asyncio.gather(*futures), 30)) == [2, 4, 6, 8, 10]
    await s.stop()


async def test_stop_drains_both_batches_in_flight() -> None:
    fake = PipelinedInstance()
    fake.hold(0)
    s = start(fake)
    futures = await held_launch(s, fake, [1, 2])
    await until(lambda: fake.finishing == [0] and len(fake.given) == 2)  # two in flight
    stopping = asyncio.create_task(s.stop(timeout=30))
    await until(lambda: s._closing)
    with pytest.raises(Unloading, match="unloading"):
        send(s, 9)
    fake.hold(0).set()
    await asyncio.wait_for(stopping, 30)
    assert answered([future.result() for future in futures]) == [-2, 2, 4]
    assert fake.finished == 2 and all(worker.done() for worker in s._workers)
