"""One long-lived thread per model instance: its batches are computed there, one at a time.

Why not ``loop.run_in_executor`` on a ``ThreadPoolExecutor``: per batch that builds a work item, a
``concurrent.futures.Future``, an asyncio future chained to it (``_chain_future``: callbacks on both
sides, a state copy) and checks the pool's size; measured on the CPU machine, a round trip cost 55 us
of process CPU against 36 us for what this does: the batch put on a ``SimpleQueue`` (C, one lock),
computed, and its outcome set on the loop's future by one ``call_soon_threadsafe``. An instance
computes one batch at a time anyway (its worker awaits each; an instance that overlaps batches has
its ``launch`` and ``finish`` calls run here in order, the device doing the overlapping), so one
thread per instance is what the pool was.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

_Work = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class InstanceThread:
    """A thread that computes what ``compute`` hands it, in order, and answers on the caller's loop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._work: SimpleQueue[_Work | None] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def compute(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``function(*args)`` run on this thread; the future (of the running loop) gets its result or
        exception. Cancelling the future does not stop the call (as with ``run_in_executor``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            self._start()
        self._work.put((loop, future, function, args))
        return future

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                # daemon: a scheduler never stopped (a test's) must not hold the interpreter's exit
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while (work := self._work.get()) is not None:
            loop, future, function, args = work
            del work
            outcome: Any = None
            try:
                outcome = function(*args)
            except BaseException as exc:  # the caller sees it, as run_in_executor's would
                _answer(loop, future, None, exc)
            else:
                _answer(loop, future, outcome, None)
            del loop, future, function, args, outcome  # a batch's tensors must not wait for the next one

    def stop(self) -> None:
        """Finish what was handed over, then end the thread (waits for it)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            self._work.put(None)
            thread.join()


def _answer(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], outcome: Any, error: BaseException | None
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits the answer any more
        loop.call_soon_threadsafe(_settle, future, outcome, error)


def _settle(future: asyncio.Future[Any], outcome: Any, error: BaseException | None) -> None:
    if future.done():  # the awaiting worker was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(outcome)
