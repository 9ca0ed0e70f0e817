"""Streamed responses take their turns of the event loop in bounded numbers, so other requests go first.

Decoupled models answer in bulk: each open request to one (up to ``--max-streamed-requests``)
hands its responses to the event loop as fast as its client reads them. Every response costs the
loop work (encoding, the write, the wake-ups along the way), and asyncio runs everything that is
ready in one turn, in arrival order: with 1,500 gRPC and 750 SSE streams open, one turn ran
hundreds of responses, and another client's request, which needs a dozen turns (its connection,
its message, admission, the batcher, the answer), waited seconds (p99 3-4.5 s on two cores).

``ResponsePacer`` is where each response waits for its turn (``ResponseStream.__aiter__``): once
per turn of the loop it lets the next ``allowance`` waiting responses on, in arrival order, so
each stream gets its share. The allowance follows how long the loop's turns take (additive
increase, multiplicative decrease): while a turn takes longer than ``target_s`` (other requests'
work, or the responses themselves), it halves, down to one response per turn (streams always
move); while turns are short it grows by one, up to ``most``. So streams use the loop when nobody
else needs it, and a burst of other requests gets the loop back within a few turns; a stream
whose buffer is empty waits on its own event and costs no turn at all.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

#: How long a turn of the loop may take before the streams' allowance halves.
TARGET_TURN_S = 0.004
#: The most streamed responses let on in one turn.
MOST_PER_TURN = 64


class ResponsePacer:
    """Lets at most ``allowance`` waiting streamed responses on per turn of the event loop (see the
    module docstring). Runs on the loop only; ``clock`` is for tests."""

    def __init__(
        self,
        target_s: float = TARGET_TURN_S,
        most: int = MOST_PER_TURN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target_s = target_s
        self.most = most
        self.allowance = most
        self._clock = clock
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._turn_started: float | None = None  # when the last turn's grants were made
        self.granted = 0  # responses let on, in all (for tests and metrics)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def turn(self) -> None:
        """Wait for this response's turn (always suspends: a stream never holds the loop)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        if self._turn_started is None:
            self._turn_started = self._clock()
            waiter.get_loop().call_soon(self._let_on)
        await waiter  # cancelled: its place is skipped when reached

    def _let_on(self) -> None:
        """Once per turn while responses wait: adjust the allowance to the last turn's length, let
        that many on, and come back next turn."""
        now = self._clock()
        started = self._turn_started
        if started is not None and now - started > self.target_s:
            self.allowance = max(1, self.allowance // 2)
        elif self.allowance < self.most:
            self.allowance += 1
        let = 0
        waiting = self._waiting
        while waiting and let < self.allowance:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                let += 1
        self.granted += let
        if waiting:
            self._turn_started = now
            asyncio.get_running_loop().call_soon(self._let_on)
        else:
            self._turn_started = None
