"""The dynamic batcher: priority queues in front of a model, one worker per instance.

A batch forms when an instance is free. It counts batch-dimension items, not requests, never mixes
requests whose non-batch shapes differ, and waits for more requests only when the config's
``dynamic_batching`` asks for it (preferred sizes / ``max_queue_delay_microseconds``, measured from
the oldest queued request). Batches are assembled, executed and split in a worker thread, off the
event loop. Queue limits and timeouts follow Triton's queue policies, and a request whose caller
went away is dropped before it runs. An instance that ``overlaps_batches`` (a GPU's) gets its next
batch launched before the current one is finished, when one can go without waiting (``_overlap``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ..backends.base import BATCHES_IN_FLIGHT, Instance
from ..errors import FerryError, Unavailable
from ..statistics import ModelStats
from .instance_thread import InstanceThread
from .interface import HOST, BatchAnswers, Execution, Memory, ModelScheduler, Outputs, PendingPixels
from .policy import SchedulingPolicy

log = logging.getLogger(__name__)

#: How far past the head of the queue the batcher looks for shape-compatible requests.
SCAN_LIMIT = 1024
#: A batch expected to take less than this much CPU time of the thread that runs it runs on the event
#: loop's thread instead of the instance's thread: for a tiny model, or a lone request to a model whose
#: engine does nothing much (a GPU's, or a no-compute benchmark's), the hand-off (waking the instance's
#: thread, waking the loop with the outcome: 36 us of CPU on 2 cores, ``instance_thread``)
#: costs more than the execution itself. Expected: the batch's items times the CPU per item of recent
#: executions (a moving average over about the last ``INLINE_AFTER_RUNS``; waiting for the GIL behind
#: a busy event loop does not count, unlike wall time), so a large batch of a model whose lone
#: requests run inline still goes to the instance's thread. Only instances that declare ``inline_when_fast``
#: (their ``compute`` waits on nothing but the engine) qualify, so a backend that sleeps or does I/O
#: in ``compute`` never blocks the loop.
#: 500 us, not 200: a batch of 8 of the tiny model costs 22-40 us of CPU per item on the loop (2 shared
#: cores, at concurrency 64 over REST), 176-320 us, so at 200 it went to the instance's thread, where a
#: busy loop's GIL inflates what it measures (~37 us per item) and kept it there: 0.73x the req/s of
#: 999df95, which ran it inline (``benchmarks/results/host-path-vs-999df95.md``).
INLINE_BELOW_NS = 500_000
#: Executions measured (on the instance's thread) before a model may run inline; also the span of the average.
INLINE_AFTER_RUNS = 8
#: A batch whose inputs hold more bytes per item than this many times the measured average goes to
#: the instance's thread whatever the average CPU time says: a large request to a usually tiny dynamic-shape
#: model must not run on the event loop and stall every other client.
INLINE_MAX_BYTES_FACTOR = 2
#: Past the first ``INLINE_AFTER_RUNS`` executions only every this-many-th one measures its CPU
#: time: reading a thread's CPU clock is a system call (no vDSO), which on virtual machines cost as
#: much as a fifth of the tiny model's whole execution when taken twice per batch.
CPU_SAMPLE_EVERY = 8
#: What all instances of the process keep together, from one batch to the next, of the memory their
#: batches' inputs are gathered in. Why: a gathered batch of ResNet-50-sized requests is megabytes,
#: past glibc's mmap threshold (``ferry.heap``), so fresh memory for it is a fresh mapping every
#: batch, whose page faults cost several times the copy into it. A batch that does not fit in what
#: is left is gathered in fresh memory, as before, so what idle models hold stays bounded by this,
#: however many are loaded.
STAGING_BYTES = 64 * 2**20


#: What a queued request that failed or was cancelled keeps of its execution: nothing. A queue
#: forgets such a request lazily (``_queued_in_order``), so it would otherwise hold the request's
#: tensors until the next scan, and with them the memory they view (a dead intake's arena).
SETTLED = Execution({}, [])


class Unloading(Unavailable):
    """This version no longer takes requests; a version that replaced it may (see DataPlane.infer)."""


@dataclass(eq=False, slots=True)
class Pending:
    """One queued execution, with what the batcher keeps of it: the future its caller waits on, or
    (``enqueue_answered``) the ``answers`` its batch's outcomes go to together, with its ``tag``."""

    execution: Execution = field(repr=False)
    batch_size: int
    signature: tuple
    level: int
    future: asyncio.Future | None = field(repr=False)
    enqueued_ns: int = field(default_factory=time.perf_counter_ns)
    started_ns: int = 0
    queued: bool = True
    delayed: bool = False
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    failure: str = "BACKEND"  # the failure reason reported if this request fails
    compute_ns: tuple[int, int, int] = (0, 0, 0)  # input, infer, output of the batch it ran in
    scheduler: Scheduler | None = field(default=None, repr=False)
    answers: BatchAnswers | None = field(default=None, repr=False)
    tag: Any = field(default=None, repr=False)
    finished: bool = False  # an answered request's outcome was given (its future's ``done``)

    def settled(self, future: asyncio.Future) -> None:
        """The future's done callback (a bound method: no closure per request)."""
        assert self.scheduler is not None
        self.scheduler._settled(self)

    def done(self) -> bool:
        """Whether its outcome was given (or its caller cancelled it)."""
        return self.finished if self.future is None else self.future.done()

    def cancel(self) -> None:
        """Cancel an answered request (``Answered``): it is answered ``CancelledError`` now."""
        assert self.scheduler is not None
        self.scheduler._cancel_answered(self)


@dataclass(eq=False, slots=True)
class Launched:
    """A batch an instance has launched and not finished (``Instance.launch``): what ``finish`` waits
    on, the staging memory its inputs may lie in, when its assembly began and ended, the outputs it
    keeps on the device (``Execution.device_outputs``); or, had the launch failed, why (its requests
    are then run one by one, ``_isolate``)."""

    batch: list[Pending]
    handle: Any = None
    staging: Staging | None = None
    gathered_ns: tuple[int, int] = (0, 0)
    kept: frozenset[str] = frozenset()
    error: Exception | None = None


def batch_signature(inputs: dict[str, np.ndarray], batched: bool, memory: Memory = HOST) -> tuple:
    """What must be equal for two requests to share a batch: names, dtypes, non-batch shapes (and
    the device, for device tensors: ``device_tensors.signature``)."""
    if memory is not HOST:
        from ..gpu import device_tensors

        return device_tensors.signature(inputs, batched)
    skip = 1 if batched else 0
    return tuple(sorted((name, array.dtype.str, array.shape[skip:]) for name, array in inputs.items()))


def choose_batch(sizes: Sequence[int], policy: SchedulingPolicy, oldest_wait_ns: int) -> int | None:
    """How many of the compatible queued requests (item counts ``sizes``, oldest first) to run now.

    Returns None to wait for more requests. Rules, after Triton's dynamic batcher: a full batch or
    one of the largest preferred size goes at once; with no delay configured, whatever is queued
    goes at once; otherwise wait until a preferred size is reached or the oldest request has
    waited ``max_queue_delay``, then send everything that fits.
    """
    if not policy.dynamic:
        return 1
    prefix = 0
    best_preferred = 0
    count = 0
    for index, size in enumerate(sizes):
        if prefix + size > policy.max_batch_size:
            break
        prefix += size
        count = index + 1
        if prefix in policy.preferred_batch_sizes:
            best_preferred = count
    total = prefix
    if total >= policy.max_batch_size:
        return count
    preferred = policy.preferred_batch_sizes
    if preferred and total >= preferred[-1]:
        return best_preferred or count
    if policy.max_queue_delay_ns == 0:
        return count
    if total in preferred:
        return count
    if oldest_wait_ns >= policy.max_queue_delay_ns:
        return count
    return None


Provide = Callable[[str, tuple[int, ...], np.dtype], np.ndarray | None]


def assemble(parts: Sequence[np.ndarray], name: str, *providers: Provide | None) -> np.ndarray:
    """One input of a batch: its parts as they lie when they follow one another in one buffer
    (``in_place``), else concatenated into the first buffer a provider offers (the instance's own,
    then the scheduler's staging memory), else into fresh memory."""
    joined = in_place(parts)
    if joined is not None:
        return joined
    destination = None
    shape = (sum(len(part) for part in parts), *parts[0].shape[1:])
    for provide in providers:
        if provide is not None and (destination := provide(name, shape, parts[0].dtype)) is not None:
            break
    return np.concatenate(parts, out=destination)


def in_place(parts: Sequence[np.ndarray]) -> np.ndarray | None:
    """The parts as one read-only array without a copy when each starts where the one before ends
    in the same buffer (consecutive blocks of an intake's arena, say); else None."""
    first = parts[0]
    owner = _owner(first)
    if owner is None or first.ndim == 0 or first.dtype.hasobject:
        return None
    address = first.ctypes.data
    for part in parts:
        if (
            _owner(part) is not owner
            or part.ctypes.data != address
            or part.dtype != first.dtype
            or part.shape[1:] != first.shape[1:]
            or not part.flags.c_contiguous
        ):
            return None
        address += part.nbytes
    shape = (sum(len(part) for part in parts), *first.shape[1:])
    return np.lib.stride_tricks.as_strided(first, shape=shape, writeable=False)


def _owner(array: np.ndarray) -> object | None:
    """The buffer an array's memory belongs to when numpy did not allocate it (an mmap), else None."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    return base


class StagingBudget:
    """What every instance's staging memory may hold together (one per process, ``STAGING``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()  # instances gather on their own threads

    def take(self, nbytes: int) -> bool:
        with self._lock:
            if self.held + nbytes > self.limit:
                return False
            self.held += nbytes
            return True

    def give(self, nbytes: int) -> None:
        with self._lock:
            self.held -= nbytes


STAGING = StagingBudget(STAGING_BYTES)
#: No outputs kept on the device (``Execution.device_outputs``): the host path's.
NOTHING: frozenset[str] = frozenset()


class Staging:
    """One instance's memory for gathering batches, reused batch after batch (see STAGING_BYTES).

    Only the instance's worker uses it, one batch at a time (an instance that overlaps batches has
    one per batch in flight), and only until the batch's outputs are split: an output that shares
    its memory (an engine returning a view of its input) is copied out before the next batch
    overwrites it (``detach``).
    """

    def __init__(self, budget: StagingBudget = STAGING) -> None:
        self.budget = budget
        self._buffers: dict[str, np.ndarray] = {}

    def provide(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        if dtype.hasobject:
            return None
        nbytes = math.prod(shape) * dtype.itemsize  # numpy.prod costs 7 us on a 4-tuple
        buffer = self._buffers.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            held = 0 if buffer is None else buffer.nbytes
            del buffer
            if not self.budget.take(nbytes - held):  # the smaller one stays
                return None
            self._buffers.pop(name, None)  # the smaller one goes before the larger one is allocated
            buffer = self._buffers[name] = np.empty(nbytes, dtype=np.uint8)
        return buffer[:nbytes].view(dtype).reshape(shape)

    def detach(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``outputs``, each copied out of the staging memory if it lies there (a device output kept
        there, ``Instance.compute_keeping``, is memory of its own)."""
        return {
            name: array.copy()
            if isinstance(array, np.ndarray) and any(np.may_share_memory(array, b) for b in self._buffers.values())
            else array
            for name, array in outputs.items()
        }

    def close(self) -> None:
        """Give the memory back (the model is unloaded)."""
        for buffer in self._buffers.values():
            self.budget.give(buffer.nbytes)
        self._buffers.clear()


class Scheduler(ModelScheduler):
    """The dynamic batcher: queues requests for one model version and feeds batches to its instances.

    Device tensors (``Memory.DEVICE``) are batched on their device, and decoded pixels
    (``Memory.PIXELS``) pre-processed once per batch there (``_gather_on_device``). Outputs an
    execution writes into device memory (``Execution.device_outputs``) stay on the device where the
    instance makes them there (``Instance.compute_keeping``)."""

    takes_device_inputs = True
    answers_batches = True

    def __init__(
        self, name: str, instances: Sequence[Instance], stats: ModelStats, policy: SchedulingPolicy | None = None
    ) -> None:
        self.name = name
        self.instances = list(instances)
        self.stats = stats
        self.policy = policy or SchedulingPolicy()
        self._batched = self.policy.max_batch_size > 0
        self._levels = self.policy.levels  # read at every batch: built once
        self._queues: dict[int, deque[Pending]] = {level: deque() for level in self._levels}
        self._delayed: deque[Pending] = deque()
        self._live: dict[int, int] = dict.fromkeys(self.policy.levels, 0)
        self._queued = 0
        self._threads = {
            id(instance): InstanceThread(f"ferry-model-{name}_{index}") for index, instance in enumerate(self.instances)
        }
        self._workers: list[asyncio.Task] = []
        self._staging = {
            id(instance): [Staging() for _ in range(BATCHES_IN_FLIGHT if instance.overlaps_batches else 1)]
            for instance in self.instances
        }
        self._may_inline = all(instance.inline_when_fast for instance in self.instances)
        self._computed = 0
        self._cpu_ns = 0.0  # moving average of an execution's CPU time per batch item
        self._input_bytes = 0.0  # moving average of an execution's input bytes per batch item
        self._form_lock = asyncio.Lock()
        self._arrived = asyncio.Event()
        self._closing = False
        self._hurried = False  # draining: requests still join, but nobody waits for more
        self._stopping = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def queue_size(self) -> int:
        return self._queued

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet answered (queued or executing)."""
        return self._in_flight

    def start(self) -> None:
        self._workers = [
            asyncio.create_task(
                (self._overlap if instance.overlaps_batches else self._work)(instance),
                name=f"{self.name}:{instance.spec.name}",
            )
            for instance in self.instances
        ]

    # --- admission ------------------------------------------------------------------------------

    async def submit(self, execution: Execution) -> Outputs:
        """Queue one execution and wait for its outputs (``enqueue``; cancelling the wait takes the
        request out of the queue)."""
        return await self.enqueue(execution)

    def enqueue(self, execution: Execution) -> asyncio.Future[Outputs]:
        """Queue one execution; its future receives the outputs.

        A decoupled model's execution carries a ``sink``: its responses go there as the model sends
        them, and the future resolves (no outputs) once the model's ``execute`` has taken the request.

        Raises Unavailable at once when the queue of its priority level is full; cancelling the
        future removes the request from the queue. Its ``timing``, when given, receives the
        request's queue and compute durations. What a request's end counts (its failure, the
        requests in flight) is settled by a callback on the future (``_settled``), not by a
        coroutine per request: a caller holding many requests (the intake hand-off) awaits none.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outputs] = loop.create_future()
        pending = self._queue(execution, batch_signature(execution.inputs, self._batched, execution.memory), future)
        future.add_done_callback(pending.settled)
        return future

    def enqueue_answered(self, execution: Execution, answers: BatchAnswers, tag: Any, signature: tuple) -> Pending:
        """``enqueue`` with no future: the outcome goes to ``answers`` with its batch's (see
        ``ModelScheduler.enqueue_answered``); what the request's end counts is settled then, in
        the same pass (``_close_answered``)."""
        pending = self._queue(execution, signature, None)
        pending.answers = answers
        pending.tag = tag
        return pending

    def _queue(self, execution: Execution, signature: tuple, future: asyncio.Future[Outputs] | None) -> Pending:
        """Put one execution in the queue of its priority level (refused when that is full)."""
        if self._closing:
            raise Unloading(f"model '{self.name}' is unloading")
        level = self.policy.level_for(execution.priority)
        queue_policy = self.policy.policy_for(level)
        if queue_policy.max_queue_size and self._live[level] >= queue_policy.max_queue_size:
            self.stats.record_failure(0, "REJECTED")
            raise Unavailable(
                f"request for model '{self.name}' rejected: exceeds maximum queue size "
                f"({queue_policy.max_queue_size} at priority level {level})",
                retry_after=1,
            )
        pending = Pending(execution, execution.batch_size if self._batched else 1, signature, level, future)
        if execution.timeline is not None:
            execution.timeline.queue_start = pending.enqueued_ns
        timeout_ns = queue_policy.timeout_ns(execution.timeout_us)
        if timeout_ns:
            pending.timer = asyncio.get_running_loop().call_later(
                timeout_ns / 1e9, self._expire, pending, queue_policy.delay_on_timeout
            )
        self._queues[level].append(pending)
        self._live[level] += 1
        self._queued += 1
        self._in_flight += 1
        self._idle.clear()
        self._arrived.set()
        pending.scheduler = self
        return pending

    def _settled(self, pending: Pending) -> None:
        """A request's end: a cancelled one leaves the queue and, with a failed one, counts as a
        failure (a success was counted with its batch's, ``_answer``)."""
        future = pending.future
        assert future is not None
        if future.cancelled():
            if pending.queued:
                self._dequeue(pending)
            self.stats.record_failure(time.perf_counter_ns() - pending.enqueued_ns, "CANCELED")
            pending.execution = SETTLED  # its inputs go now, not when the queue is next scanned
        elif future.exception() is not None:
            self.stats.record_failure(time.perf_counter_ns() - pending.enqueued_ns, pending.failure)
            pending.execution = SETTLED
        else:
            timing = pending.execution.timing
            if timing is not None:
                timing.queue_ns += pending.started_ns - pending.enqueued_ns
                timing.compute_input_ns += pending.compute_ns[0]
                timing.compute_infer_ns += pending.compute_ns[1]
                timing.compute_output_ns += pending.compute_ns[2]
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    def _cancel_answered(self, pending: Pending) -> None:
        """An answered request's caller went away: out of the queue, answered ``CancelledError``
        (once: a request already answered is left as it is)."""
        if pending.finished:
            return
        self._dequeue(pending)
        pending.failure = "CANCELED"
        self._fail(pending, asyncio.CancelledError())

    def _fail(self, pending: Pending, error: BaseException) -> None:
        """Answer a request that has not run with ``error`` (its ``failure`` says why, in the statistics)."""
        if pending.future is None:
            if pending.finished:
                return
            pending.finished = True
            self._close_answered(pending, pending.failure)
            assert pending.answers is not None
            pending.answers.answer([(pending.tag, error)])
        elif not pending.future.done():
            pending.future.set_exception(error)

    def _close_answered(self, pending: Pending, failure: str | None) -> None:
        """What an answered request's end counts, as ``_settled`` does for a future's: a failure
        (``failure``: why) in the statistics, its inputs let go, the requests in flight."""
        if failure is not None:
            self.stats.record_failure(time.perf_counter_ns() - pending.enqueued_ns, failure)
            pending.execution = SETTLED
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    def _dequeue(self, pending: Pending) -> None:
        """Take a request out of the queue (lazily: the deque entry is skipped later)."""
        if not pending.queued:
            return
        pending.queued = False
        if not pending.delayed:
            self._live[pending.level] -= 1
        self._queued -= 1
        if pending.timer is not None:
            pending.timer.cancel()

    def _expire(self, pending: Pending, delay: bool) -> None:
        """A queued request's timeout passed: reject it now, or (DELAY) move it behind the others."""
        if not pending.queued:
            return
        if delay:
            pending.delayed = True
            self._live[pending.level] -= 1
            self._delayed.append(pending)
            return
        self._dequeue(pending)
        pending.failure = "REJECTED"
        waited_ms = (time.perf_counter_ns() - pending.enqueued_ns) / 1e6
        self._fail(
            pending, Unavailable(f"request for model '{self.name}' timed out after {waited_ms:.1f} ms in the queue")
        )

    # --- batch formation ------------------------------------------------------------------------

    def _queued_in_order(self) -> Iterator[Pending]:
        """Live queued requests: by priority level, FIFO within a level, delayed ones last."""
        for level in self._levels:
            queue = self._queues[level]
            while queue and (not queue[0].queued or queue[0].delayed):
                queue.popleft()
            for pending in queue:
                if pending.queued and not pending.delayed:
                    yield pending
        while self._delayed and not self._delayed[0].queued:
            self._delayed.popleft()
        for pending in self._delayed:
            if pending.queued:
                yield pending

    def _form(self) -> tuple[list[Pending] | None, int | None]:
        """The batch to run now (taken out of the queue), else None and how many more nanoseconds its
        head may wait for others to join (None: nothing is queued)."""
        head: Pending | None = None
        group: list[Pending] = []
        for scanned, pending in enumerate(self._queued_in_order()):
            if head is None:
                head = pending
                group.append(pending)
                if not self.policy.dynamic:
                    break
            elif pending.signature == head.signature:
                group.append(pending)
            if scanned >= SCAN_LIMIT:
                break
        if head is None:
            return None, None
        waited = time.perf_counter_ns() - head.enqueued_ns
        if self._closing or self._hurried:  # no more are coming: waiting for them only delays
            waited = max(waited, self.policy.max_queue_delay_ns)
        count = choose_batch([p.batch_size for p in group], self.policy, waited)
        if count is None:
            return None, max(self.policy.max_queue_delay_ns - waited, 0)
        batch = group[:count]
        for pending in batch:
            self._dequeue(pending)
        return batch, None

    async def _next_batch(self) -> list[Pending] | None:
        """Wait for and take the next batch; None once stopping with nothing left."""
        while True:
            batch, wait_ns = self._form()
            if batch is not None:
                return batch
            self._arrived.clear()
            if wait_ns is None:
                if self._stopping:
                    return None
                await self._arrived.wait()
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), wait_ns / 1e9)

    def _batch_now(self) -> list[Pending] | None:
        """A batch that can go without waiting for more requests, for an instance that has one in
        flight already; None when there is none, or when an idle instance is forming one (it goes
        first: it has nothing in flight)."""
        if self._form_lock.locked():
            return None
        return self._form()[0]

    async def _work(self, instance: Instance) -> None:
        while True:
            async with self._form_lock:
                batch = await self._next_batch()
            if batch is None:
                return
            batch = _live(batch)
            if not batch:
                continue
            _started(batch)
            try:
                nbytes = _input_bytes(batch)
                if self._inline(sum(p.batch_size for p in batch), nbytes):
                    results = self._compute_batch(instance, batch, nbytes)
                else:
                    results = await self._threads[id(instance)].compute(self._compute_batch, instance, batch, nbytes)
            except Exception as exc:  # the whole batch failed: find out which request caused it
                results = await self._isolate(instance, batch, exc)
            self._answer(batch, results)
            # the last batch's tensors (a request's body, or the intake arena or spill it was read from)
            # must not live on while this worker waits for the next batch
            del batch, results

    async def _overlap(self, instance: Instance) -> None:
        """The worker of an instance that ``overlaps_batches``: it launches a batch, then, while that
        batch computes, launches the next if one can go now (without waiting out a queue delay), so
        the next batch's assembly and host-to-device copy overlap the current compute. At most
        ``BATCHES_IN_FLIGHT`` are in flight, each in its own buffer set (``slot``, taken in turn: the
        batch in flight, if any, is the one launched last); they are finished and answered in the
        order they were launched."""
        flight: deque[Launched] = deque()
        slot = 0
        while True:
            batch: list[Pending] | None = None
            if not flight:
                async with self._form_lock:
                    batch = await self._next_batch()
                if batch is None:
                    return
            elif len(flight) < BATCHES_IN_FLIGHT:
                batch = self._batch_now()
            batch = _live(batch) if batch else None
            if batch:
                flight.append(await self._launch(instance, batch, slot))
                slot = (slot + 1) % BATCHES_IN_FLIGHT
            elif flight:
                await self._finish_oldest(instance, flight)

    async def _launch(self, instance: Instance, batch: list[Pending], slot: int) -> Launched:
        """Assemble a batch in buffer set ``slot`` and launch it on the instance's thread."""
        _started(batch)
        try:
            return await self._threads[id(instance)].compute(self._launch_batch, instance, batch, slot)
        except Exception as exc:  # answered in its turn, its requests one by one
            return Launched(batch, error=exc)

    async def _finish_oldest(self, instance: Instance, flight: deque[Launched]) -> None:
        """Finish and answer the oldest batch in flight. A failed one is re-run a request at a time
        (``_isolate``) once the batches launched after it are finished (so nothing else is in flight
        meanwhile), and answered before them."""
        oldest = flight.popleft()
        outcome = await self._outcome(instance, oldest)
        if not isinstance(outcome, Exception):
            self._answer(oldest.batch, outcome)
            return
        later = [(launched, await self._outcome(instance, launched)) for launched in flight]
        flight.clear()
        self._answer(oldest.batch, await self._isolate(instance, oldest.batch, outcome))
        for launched, result in later:
            if isinstance(result, Exception):
                result = await self._isolate(instance, launched.batch, result)
            self._answer(launched.batch, result)

    async def _outcome(self, instance: Instance, launched: Launched) -> list[Outputs | BaseException] | Exception:
        """A launched batch's results, or the error that failed its launch or its finish."""
        if launched.error is not None:
            return launched.error
        try:
            return await self._threads[id(instance)].compute(self._finish_batch, instance, launched)
        except Exception as exc:
            return exc

    def _answer(self, batch: list[Pending], results: list[Outputs | BaseException]) -> None:
        """Settle each request of an executed batch; the successes go to the statistics at once
        (one lock for the batch, not one per request)."""
        done = time.perf_counter_ns()
        succeeded = []
        answered: dict[BatchAnswers, list[tuple[Any, Outputs | BaseException]]] = {}
        for pending, result in zip(batch, results, strict=True):
            future = pending.future
            if future is None:
                if pending.finished:
                    continue
                pending.finished = True
                assert pending.answers is not None
                answered.setdefault(pending.answers, []).append((pending.tag, result))
            elif future.done():
                continue
            elif isinstance(result, BaseException):
                future.set_exception(result)
                continue
            else:
                future.set_result(result)
            if isinstance(result, BaseException):
                self._close_answered(pending, pending.failure)
            else:
                succeeded.append((done - pending.enqueued_ns, pending.started_ns - pending.enqueued_ns))
                if future is None:
                    self._close_answered(pending, None)
        self.stats.record_successes(succeeded)
        for answers, outcomes in answered.items():
            try:
                answers.answer(outcomes)
            except Exception:  # the worker goes on serving the model whatever a caller's answers do
                log.exception("model '%s': answering a batch failed", self.name)

    @property
    def computes_inline(self) -> bool:
        """Whether a lone request of one item runs on the event loop's thread (see INLINE_BELOW_NS)."""
        return self._may_inline and self._computed >= INLINE_AFTER_RUNS and self._cpu_ns < INLINE_BELOW_NS

    def _inline(self, items: int, nbytes: int) -> bool:
        """Whether a batch of ``items`` holding ``nbytes`` runs on the event loop's thread."""
        items = max(items, 1)
        return (
            self.computes_inline
            and self._cpu_ns * items < INLINE_BELOW_NS
            and nbytes <= INLINE_MAX_BYTES_FACTOR * self._input_bytes * items
        )

    async def _isolate(self, instance: Instance, batch: list[Pending], exc: Exception) -> list[Outputs | BaseException]:
        """Re-run a failed batch one request at a time so one bad request fails alone."""
        if len(batch) == 1:
            return [_as_request_error(self.name, exc)]
        results: list[Outputs | BaseException] = []
        for pending in batch:
            if pending.done():  # cancelled meanwhile (its execution is ``SETTLED``): nothing to run
                results.append({})
                continue
            try:
                results.extend(
                    await self._threads[id(instance)].compute(
                        self._compute_batch, instance, [pending], _input_bytes([pending])
                    )
                )
            except Exception as single:
                results.append(_as_request_error(self.name, single))
        return results

    def _compute_batch(self, instance: Instance, batch: list[Pending], nbytes: int) -> list[Outputs | BaseException]:
        """Concatenate, execute and split one batch (in a worker thread, or inline when fast);
        ``nbytes``: the batch's input bytes, as the caller counted them."""
        sample = self._computed < INLINE_AFTER_RUNS or self._computed % CPU_SAMPLE_EVERY == 0
        cpu0 = time.thread_time_ns() if sample else 0
        t0 = time.perf_counter_ns()
        inputs, names, staging = self._gather(instance, batch, 0)
        kept = _kept_on_device(batch) if instance.takes_device_inputs else NOTHING
        t1 = time.perf_counter_ns()
        outputs = instance.compute_keeping(inputs, names, kept) if kept else instance.compute(inputs, names)
        t2 = time.perf_counter_ns()
        total = sum(p.batch_size for p in batch)
        split = _split(batch, outputs if staging is None else staging.detach(outputs), total, kept)
        t3 = time.perf_counter_ns()
        self._computed += 1
        span = min(self._computed, INLINE_AFTER_RUNS)
        items = max(total, 1)
        if sample:
            self._cpu_ns += ((time.thread_time_ns() - cpu0) / items - self._cpu_ns) / span
        self._input_bytes += (nbytes / items - self._input_bytes) / span
        self._record(batch, total, t0, t1, t2, t3)
        return split

    def _launch_batch(self, instance: Instance, batch: list[Pending], slot: int) -> Launched:
        """Assemble a batch in buffer set ``slot`` and launch it (``Instance.launch``; on the
        instance's thread), without waiting for its outputs."""
        t0 = time.perf_counter_ns()
        inputs, names, staging = self._gather(instance, batch, slot)
        kept = _kept_on_device(batch) if instance.takes_device_inputs else NOTHING
        t1 = time.perf_counter_ns()
        return Launched(batch, instance.launch(inputs, names, slot, kept), staging, (t0, t1), kept)

    def _finish_batch(self, instance: Instance, launched: Launched) -> list[Outputs | BaseException]:
        """Wait for a launched batch's outputs and split them (on the instance's thread)."""
        outputs = instance.finish(launched.handle)
        t2 = time.perf_counter_ns()
        staging = launched.staging
        total = sum(p.batch_size for p in launched.batch)
        split = _split(launched.batch, outputs if staging is None else staging.detach(outputs), total, launched.kept)
        self._record(launched.batch, total, *launched.gathered_ns, t2, time.perf_counter_ns())
        return split

    def _gather(self, instance: Instance, batch: list[Pending], slot: int) -> tuple[Outputs, list[str], Staging | None]:
        """A batch's inputs as the instance takes them (assembled in buffer set ``slot`` where
        they are gathered), the outputs its requests ask for, and the staging memory used, if any."""
        if batch[0].execution.memory is not HOST:  # a signature never mixes memories
            return _gather_on_device(instance, batch), _requested(batch), None
        if len(batch) == 1:
            return batch[0].execution.inputs, batch[0].execution.outputs, None
        staging = self._staging[id(instance)][slot]
        offered = functools.partial(instance.input_buffer, slot=slot)
        inputs = {
            name: assemble([p.execution.inputs[name] for p in batch], name, offered, staging.provide)
            for name in batch[0].execution.inputs
        }
        return inputs, _requested(batch), staging

    def _record(self, batch: list[Pending], total: int, t0: int, t1: int, t2: int, t3: int) -> None:
        """A computed batch of ``total`` items in the statistics and its requests' timings and
        timelines: assembled from ``t0`` to ``t1``, computed until ``t2``, split until ``t3``."""
        compute_ns = (t1 - t0, t2 - t1, t3 - t2)
        self.stats.record_execution(total, len(batch), *compute_ns)
        for pending in batch:
            pending.compute_ns = compute_ns
            timeline = pending.execution.timeline
            if timeline is not None:
                timeline.compute_input_end, timeline.compute_output_start = t1, t2
                timeline.compute_end = t3

    # --- shutdown ---------------------------------------------------------------------------------

    def hurry(self) -> None:
        """Stop waiting out ``max_queue_delay`` (the server is draining: no new clients will come),
        while still accepting the requests already on their way in."""
        self._hurried = True
        self._arrived.set()

    async def stop(self, timeout: float | None = None) -> None:
        """Refuse new requests, finish queued and running ones (within ``timeout``), stop workers."""
        self._closing = True
        self._arrived.set()  # a batcher waiting out max_queue_delay sends what it holds now
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("model '%s': %d requests unfinished at unload", self.name, self._in_flight)
            for pending in list(self._queued_in_order()):
                self._dequeue(pending)
                pending.failure = "REJECTED"
                self._fail(pending, Unavailable(f"model '{self.name}' unloaded before the request ran"))
        self._stopping = True
        self._arrived.set()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for thread in self._threads.values():
            thread.stop()  # its worker has returned: nothing but a cancelled caller's batch is left to finish
        for sets in self._staging.values():
            for staging in sets:
                staging.close()


def _live(batch: list[Pending]) -> list[Pending]:
    """The requests of a batch whose callers still wait (a cancelled one is dropped before it runs)."""
    return [p for p in batch if not p.done()]


def _started(batch: list[Pending]) -> None:
    """Stamp a batch's requests (and their timelines) with the moment their compute began."""
    started = time.perf_counter_ns()
    for pending in batch:
        pending.started_ns = started
        if pending.execution.timeline is not None:
            pending.execution.timeline.compute_start = started


def _requested(batch: list[Pending]) -> list[str]:
    """The outputs any request of a batch asks for, each once, in the order first asked."""
    return list(dict.fromkeys(name for p in batch for name in p.execution.outputs))


def _split(batch: list[Pending], outputs: Outputs, total: int, kept: frozenset[str]) -> list[Outputs | BaseException]:
    """A batch's outputs (``total`` items) cut into each request's rows (a batch of one keeps them
    whole); where some were ``kept`` on the device, each request gets in host memory those it did
    not ask for there (``_placed``)."""
    if len(batch) == 1:
        return [outputs]
    split: list[Outputs | BaseException] = []
    offset = 0
    for pending in batch:
        end = offset + pending.batch_size
        share = {name: outputs[name][offset:end] for name in pending.execution.outputs}
        split.append(_placed(share, pending.execution.device_outputs) if kept else share)
        offset = end
    for name, array in outputs.items():
        if array.shape[:1] != (total,):
            raise FerryError(
                f"model output '{name}' has shape {list(array.shape)}, which does not start with the batch size {total}"
            )
    return split


def _as_request_error(model: str, exc: BaseException) -> FerryError:
    if isinstance(exc, FerryError):
        return exc
    log.warning("model '%s': inference failed: %s", model, exc)
    return FerryError(f"inference failed: {exc}")


def _gather_on_device(instance: Instance, batch: list[Pending]) -> Outputs:
    """A batch of device tensors joined on their device (``torch.cat``, no numpy), or of decoded
    pixels pre-processed on the device in one call (``Memory.PIXELS``); brought to host memory once
    for the whole batch where the instance reads host memory only."""
    from ..gpu import device_tensors

    first = batch[0].execution
    if first.memory is Memory.PIXELS:
        inputs = {
            name: cast(PendingPixels, pixels).gather([p.execution.inputs[name] for p in batch[1:]])
            for name, pixels in first.inputs.items()
        }
    else:
        inputs = {name: device_tensors.join([p.execution.inputs[name] for p in batch]) for name in first.inputs}
    return inputs if instance.takes_device_inputs else device_tensors.to_host(inputs)


def _kept_on_device(batch: list[Pending]) -> frozenset[str]:
    """The outputs some execution of the batch writes into device memory (a CUDA region)."""
    kept = batch[0].execution.device_outputs
    for pending in batch[1:]:
        kept = kept | pending.execution.device_outputs
    return kept


def _placed(outputs: Outputs, kept: frozenset[str]) -> Outputs:
    """One execution's share of a batch whose outputs ``kept`` some other execution asked to keep on
    the device: those this one did not ask for there brought to host memory."""
    from ..gpu import device_tensors

    return device_tensors.host_except(outputs, kept)


def _input_bytes(batch: list[Pending]) -> int:
    return sum(array.nbytes for pending in batch for array in pending.execution.inputs.values())
