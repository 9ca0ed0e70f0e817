"""One queue per model version and one worker per instance.

A free instance takes the oldest queued request and runs it in a worker thread (engines release
the GIL), so an idle server adds no delay and several instances run side by side.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..backends.base import Instance
from ..errors import FerryError, Unavailable
from ..statistics import ModelStats

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    inputs: dict[str, np.ndarray]
    outputs: list[str]
    future: asyncio.Future = field(repr=False)
    batch_size: int = 1
    enqueued_ns: int = field(default_factory=time.perf_counter_ns)
    started_ns: int = 0


class Scheduler:
    """Feeds queued requests to the model's instances; ``submit`` returns the outputs."""

    def __init__(self, name: str, instances: Sequence[Instance], stats: ModelStats) -> None:
        self.name = name
        self.stats = stats
        self.instances = list(instances)
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, len(self.instances)), thread_name_prefix=f"ferry-{name}"
        )
        self._workers: list[asyncio.Task] = []
        self._closing = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(instance), name=f"{self.name}:{instance.spec.name}")
            for instance in self.instances
        ]

    async def submit(
        self, inputs: dict[str, np.ndarray], outputs: list[str], batch_size: int = 1
    ) -> dict[str, np.ndarray]:
        """Queue one request and wait for its outputs."""
        if self._closing:
            raise Unavailable(f"model '{self.name}' is unloading")
        future = asyncio.get_running_loop().create_future()
        pending = _Pending(inputs, outputs, future, batch_size)
        self._in_flight += 1
        self._idle.clear()
        try:
            self._queue.put_nowait(pending)
            result = await future
        except FerryError:
            self.stats.record_failure(time.perf_counter_ns() - pending.enqueued_ns)
            raise
        else:
            done = time.perf_counter_ns()
            self.stats.record_success(done - pending.enqueued_ns, pending.started_ns - pending.enqueued_ns)
            return result
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _work(self, instance: Instance) -> None:
        loop = asyncio.get_running_loop()
        while True:
            pending = await self._queue.get()
            if pending is None:
                return
            if pending.future.done():  # the caller went away while it waited
                continue
            pending.started_ns = time.perf_counter_ns()
            try:
                result = await loop.run_in_executor(self._executor, self._execute, instance, pending)
            except FerryError as exc:
                self._resolve(pending, exc=exc)
            except Exception as exc:  # an engine error fails this request only
                log.warning("model '%s': inference failed: %s", self.name, exc)
                self._resolve(pending, exc=FerryError(f"inference failed: {exc}"))
            else:
                self._resolve(pending, result=result)

    def _execute(self, instance: Instance, pending: _Pending) -> dict[str, np.ndarray]:
        started = time.perf_counter_ns()
        result = instance.run(pending.inputs, pending.outputs)
        self.stats.record_execution(pending.batch_size, 1, 0, time.perf_counter_ns() - started, 0)
        return result

    @staticmethod
    def _resolve(pending: _Pending, result=None, exc: BaseException | None = None) -> None:
        if pending.future.done():
            return
        if exc is not None:
            pending.future.set_exception(exc)
        else:
            pending.future.set_result(result)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop taking requests, let queued and running ones finish, then stop the workers."""
        self._closing = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("model '%s': %d requests still running at unload", self.name, self._in_flight)
        for _ in self._workers:
            self._queue.put_nowait(None)
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._executor.shutdown(wait=True)
