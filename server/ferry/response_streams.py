"""The responses of one decoupled request, carried from the model's threads to a front door.

A decoupled model answers a request with zero, one or many responses, at any time and from any
thread, the last one flagged final. Each request gets a ``ResponseStream``: the model side puts
responses in (``put``, thread-safe), the front door reads them on the event loop (``__aiter__``).
The buffer is bounded: a producer that gets ahead of a client that does not read waits
(backpressure) instead of piling responses up in memory, and stops waiting the moment the request
is cancelled (the client went away, or the server ends the stream at shutdown).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .errors import ErrorKind, FerryError
from .response_pacing import ResponsePacer

#: Responses a stream holds before its producer waits for the reader.
BUFFERED_RESPONSES = 16


@dataclass
class StreamedResponse:
    """One response: outputs (possibly none) or an error; ``final`` ends the request. ``sent_ns``
    (``time.perf_counter_ns``) is when the model sent it: the statistics split a response's time
    there, into computing it (before) and its output (after)."""

    outputs: dict[str, np.ndarray]
    error: FerryError | None = None
    final: bool = False
    sent_ns: int = field(default_factory=time.perf_counter_ns)


class ResponseSink(Protocol):
    """Where a decoupled model's responses go: a request's ``ResponseStream``, or a view of one
    (an ensemble's last step writes under the ensemble's output names)."""

    @property
    def cancelled(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    @property
    def responses(self) -> int: ...

    def put(self, response: StreamedResponse) -> bool: ...


class ResponseStream:
    """A bounded, thread-safe channel of ``StreamedResponse`` for one request."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, capacity: int = BUFFERED_RESPONSES, pacer: ResponsePacer | None = None
    ) -> None:
        self._loop = loop
        self._capacity = capacity
        # a waiting producer is woken once the buffer is down to half, not for every response read:
        # each wake-up is a futex call and a GIL hand-over on the loop's thread (12% of its time
        # with 512 producers)
        self._low_water = capacity // 2
        self._pacer = pacer or ResponsePacer()
        self._items: deque[StreamedResponse] = deque()
        self._space = threading.Condition()
        self._producers_waiting = 0
        self._ready = asyncio.Event()
        self._cancelled = threading.Event()
        self.finished = False  # the final response was put
        self.responses = 0

    # --- the model side (any thread) ----------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def put(self, response: StreamedResponse) -> bool:
        """Queue a response, waiting while the buffer is full; False when the request was cancelled
        (the response is dropped). Never call it on the event loop with a full buffer."""
        with self._space:
            if self.finished:
                raise FerryError("the request already has its final response", ErrorKind.INTERNAL)
            while len(self._items) >= self._capacity and not self._cancelled.is_set():
                # no timeout: every change that frees room or ends the wait notifies (a reader's
                # pop, cancel, fail), and thousands of waiting producers polling would take the
                # GIL from the event loop ten times a second each
                self._producers_waiting += 1
                try:
                    self._space.wait()
                finally:
                    self._producers_waiting -= 1
            if self._cancelled.is_set():
                self.finished = self.finished or response.final
                return False
            self._items.append(response)
            self.finished = response.final
            self.responses += 1
        self._loop.call_soon_threadsafe(self._ready.set)
        return True

    def fail(self, error: FerryError) -> None:
        """End the request with an error now, from the event loop (shutdown), whatever the model does."""
        with self._space:
            if self.finished:
                return
            self._items.append(StreamedResponse({}, error, final=True))
            self.finished = True
            self._cancelled.set()  # the model's later responses are dropped
            self._space.notify_all()
        self._ready.set()

    # --- the front door side (the event loop) ---------------------------------------------------

    def cancel(self) -> None:
        """The reader is gone: wake a waiting producer and drop what it sends from now on."""
        with self._space:
            self._cancelled.set()
            self._items.clear()
            self._space.notify_all()

    async def __aiter__(self) -> AsyncIterator[StreamedResponse]:
        """The responses as they come, each in its turn of the pacer (``response_pacing.py``),
        which suspends at least once for each: a producer that keeps the buffer full would
        otherwise never let the reader give the loop back (a reader whose sends do not wait,
        toward a client that is gone, froze every port), and others' requests go first."""
        while True:
            if not self._ready.is_set():
                await self._ready.wait()  # an idle stream waits here, costing no turn
            await self._pacer.turn()
            with self._space:
                item = self._items.popleft() if self._items else None
                if not self._items:
                    self._ready.clear()
                if self._producers_waiting and len(self._items) <= self._low_water:
                    self._space.notify_all()
            if item is None:
                continue
            yield item
            if item.final:
                return
