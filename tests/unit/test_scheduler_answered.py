"""Requests queued with ``Scheduler.enqueue_answered``: no future each, a batch's outcomes handed to
their ``BatchAnswers`` in one call, and every rule of the queue (timeouts, cancelling, a bad request
failing alone, unloading, the statistics) as for a request with a future. The fake instance of
``test_scheduler`` holds each batch at its gate, so the queue is in the state each test checks."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from ferry.errors import FerryError, Unavailable
from ferry.scheduling import QueuePolicy
from ferry.scheduling.interface import Execution, Outputs
from ferry.scheduling.scheduler import Scheduler, batch_signature

from .test_scheduler import GatedInstance, make, policy, request, submit, until, wait_started


class Answers:
    """Records each ``answer`` call: one list of (tag, outcome) per call."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[Any, Outputs | BaseException]]] = []

    def answer(self, outcomes: list[tuple[Any, Outputs | BaseException]]) -> None:
        self.calls.append(list(outcomes))

    def outcomes(self) -> dict[Any, Outputs | BaseException]:
        return {tag: outcome for call in self.calls for tag, outcome in call}


async def _held(s: Scheduler, fake: GatedInstance) -> asyncio.Task:
    """A request the fake instance is running, held at its gate (the queue fills behind it)."""
    fake.gate.clear()
    running = asyncio.create_task(submit(s, 0))
    await wait_started(fake)
    return running


def queue(s: Scheduler, answers: Answers, value: float, tag: Any) -> Any:
    inputs = request(value)
    return s.enqueue_answered(Execution(inputs, ["y"], 1), answers, tag, batch_signature(inputs, True))


async def test_a_batch_of_answered_requests_is_answered_in_one_call_with_future_requests_beside() -> None:
    s, (fake,) = await make(policy())
    running = await _held(s, fake)
    answers = Answers()
    for value in (1, 2, 3):
        queue(s, answers, value, f"tag{value}")
    with_future = asyncio.create_task(submit(s, 4))
    await until(lambda: s.queue_size == 4)
    assert s.in_flight == 5
    fake.gate.set()
    await asyncio.gather(running, with_future)
    await until(lambda: s.in_flight == 0)
    assert len(answers.calls) == 1  # the three answered requests' batch: one call
    assert [tag for tag, _ in answers.calls[0]] == ["tag1", "tag2", "tag3"]
    for value in (1, 2, 3):
        np.testing.assert_array_equal(answers.outcomes()[f"tag{value}"]["y"], np.full((1, 3), 2.0 * value))  # type: ignore[index]
    assert [b.shape[0] for b in fake.batches] == [1, 4]  # answered and future requests batched together
    stats = s.stats.as_dict()
    assert stats["inference_count"] == 5 and stats["inference_stats"]["success"]["count"] == 5
    await s.stop()


async def test_a_bad_answered_request_fails_alone_and_counts_as_a_failure() -> None:
    s, (fake,) = await make(policy())
    running = await _held(s, fake)
    answers = Answers()
    for tag, value in (("good", 1.0), ("bad", float("nan")), ("also good", 3.0)):
        queue(s, answers, value, tag)
    await until(lambda: s.queue_size == 3)
    fake.gate.set()
    await running
    await until(lambda: s.in_flight == 0)
    outcomes = answers.outcomes()
    assert isinstance(outcomes["bad"], FerryError) and "NaN in input" in outcomes["bad"].message
    np.testing.assert_array_equal(outcomes["also good"]["y"], np.full((1, 3), 6.0))  # type: ignore[index]
    assert s.stats.failures == {"BACKEND": 1}
    await s.stop()


async def test_an_answered_request_past_its_queue_timeout_is_answered_unavailable() -> None:
    s, (fake,) = await make(policy(queue_policies={1: QueuePolicy(default_timeout_ns=50_000_000)}))
    running = await _held(s, fake)
    answers = Answers()
    queue(s, answers, 1, "late")
    await until(lambda: bool(answers.calls))  # the timer fired while the instance is still held
    assert not fake.gate.is_set()
    ((tag, outcome),) = answers.calls[0]
    assert tag == "late" and isinstance(outcome, Unavailable) and "timed out after" in outcome.message
    assert s.in_flight == 1 and s.queue_size == 0
    fake.gate.set()
    await running
    assert len(fake.batches) == 1 and s.stats.failures == {"REJECTED": 1}
    await s.stop()


async def test_cancelling_an_answered_request_answers_it_at_once_and_it_never_runs() -> None:
    s, (fake,) = await make(policy())
    running = await _held(s, fake)
    answers = Answers()
    doomed = queue(s, answers, 99, "doomed")
    queue(s, answers, 1, "kept")
    await until(lambda: s.queue_size == 2)
    doomed.cancel()
    assert answers.calls == [[("doomed", answers.calls[0][0][1])]]
    assert isinstance(answers.calls[0][0][1], asyncio.CancelledError)
    assert s.queue_size == 1 and s.in_flight == 2
    doomed.cancel()  # a second cancel answers nothing more
    assert len(answers.calls) == 1
    fake.gate.set()
    await running
    await until(lambda: s.in_flight == 0)
    assert 99.0 not in np.concatenate([b.reshape(-1) for b in fake.batches])
    assert s.stats.failures == {"CANCELED": 1}
    await s.stop()


async def test_answered_requests_left_in_the_queue_at_unload_are_answered_unavailable() -> None:
    s, (fake,) = await make(policy())
    running = await _held(s, fake)
    answers = Answers()
    queue(s, answers, 1, "stranded")
    await until(lambda: s.queue_size == 1)
    stopping = asyncio.create_task(s.stop(timeout=0.05))
    await until(lambda: bool(answers.calls))  # the stop's timeout passed with the instance still held
    ((tag, outcome),) = answers.calls[0]
    assert (
        tag == "stranded" and isinstance(outcome, Unavailable) and "unloaded before the request ran" in outcome.message
    )
    fake.gate.set()
    await asyncio.gather(running, stopping)
    with pytest.raises(FerryError, match="unloading"):
        queue(s, answers, 2, "after")
