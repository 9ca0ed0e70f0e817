"""Turns for receiving request messages, per peer address: unary calls', and streams' (which end
streams idle on one).

``PeerTurns``: grpc reads a message whole, and parses it, before admission can see its size, so
one client sending many large messages at once had them all in memory, uncounted. A call asks for
its message only in a turn of its peer, a few at a time; with BDP probing off (``grpc_limits.py``)
grpc grants a stream whose message nobody has asked for no more than its initial 64 KiB window,
so a waiting call holds that, not its message. Unary calls take ``--grpc-reads-per-peer`` turns
(``grpc_calls.MessageDeadlines`` times their wait).

A stream (``ModelStreamInfer``) asks grpc for its next message as soon as it has answered the last,
and grpc receives a message whole, before admission can see its size: with every open stream
asking, one client's 16 streams each sending 47 MiB (from 16 processes) peaked at +1.4 GB, and
nothing bounded it but the client's own stream count. So a stream asks only in a turn of its peer
address, as unary calls do (``StreamTurns``; ``--grpc-stream-reads-per-peer``, 8 by default, 0 for
none), from a pool of its own within the receive budget (below): a stream between requests holds
its turn while it waits for its client's next message, and unary calls must never wait behind that.
With fewer turns than streams a client's request-and-answer streams wait on each other's round
trips (perf_analyzer ``--streaming`` on the tiny model, one address: 0.56x with 2 turns at 16
streams against no turns; the default 5 stream turns against 8: about 1.0x at 8 streams, 0.73x at
16, docs/reliability.md).

A posted read cannot be taken back (grpc.aio has no way to withdraw it, nor to see a message's size
before reading it), so a stream idle on a turn would keep its peer's other streams from receiving
for as long as it stays idle (streams that send at their own pace, a camera's event-driven frames,
more of them than the turns from one address). A stream that has held a turn with no traffic either
way (no request received, no response sent) for ``idle_timeout`` seconds, once another stream of its
address has waited a sweep period for a turn, is therefore ended alone, with UNAVAILABLE naming both
options (``grpc_cancel.end_call``; the client's other calls on the connection go on). A stream with
work in flight answers within that time, or counts as idle like any other. Streams of this server's
own intake processes (a unix socket, no peer address) take no turns: each intake gates its own
clients.

Turns per address are multiplied by the addresses a client has (any local user has 127.0.0.0/8, a
network client may have an IPv6 /64): 16 loopback addresses x 2 unary calls of 47 MiB held +1.0-1.5
GB uncounted, 16 addresses x 1 stream +1 GB; and with a total per kind of turn the unary and stream
pools still added up (16 streams of one address: +755 MB). So one budget bounds every posted read of
all addresses together (``ReceiveBudget``: ``--grpc-receive-bytes`` over ``--grpc-max-message-bytes``
turns, each read may receive a message that large): streams may hold all but one of them, so unary
calls never wait behind idle streams, a freed turn goes to a waiting unary call first, then address
after address, and a stream idle on a turn gives way to a waiting stream of any address when all the
turns are held. A lower ``--grpc-max-message-bytes`` gives more turns for the same memory: the way
to run many streams of small messages.

Everything runs on the server's event loop, so plain dicts are the state; one periodic sweep, only
while a stream waits, looks for idle holders.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from . import grpc_cancel

log = logging.getLogger(__name__)

#: How often a sweep looks for late messages (grpc_calls) or idle holders of stream turns, as a
#: share of its timeout (at most once a second).
SWEEPS_PER_TIMEOUT = 4


class ReceiveBudget:
    """The turns of every kind together (``turns``: the receive budget over the largest message,
    0: no cap), shared by the unary and the stream ``PeerTurns`` (``pools``, unary first: a turn
    freed goes to a waiting unary call before a waiting stream).

    Why one budget: each posted read may receive a message of up to ``--grpc-max-message-bytes``
    before admission sees it, and the unary and stream pools added up (16 streams of 47 MiB from
    one address: +755 MB; 16 addresses x 2 unary calls: +516 MB)."""

    def __init__(self, turns: int = 0) -> None:
        self.turns = turns
        self.held = 0
        self.pools: list[PeerTurns] = []

    def full(self) -> bool:
        return bool(self.turns) and self.held >= self.turns

    def hand_over(self) -> None:
        """A turn came free: to the first pool with a call waiting that may take it."""
        for pool in self.pools:
            if pool.hand_over():
                return


class PeerTurns:
    """At most ``limit`` request messages of one peer being received at once, and at most ``total``
    of all peers together (0: no such cap), within ``budget``'s turns when given (shared with the
    other pool); the others wait, in arrival order within a peer and peer after peer across them (a
    peer just served goes to the back). Everything runs on the server's event loop, so plain dicts
    are the state.

    Why ``total``: turns per address alone are multiplied by addresses, and any local user has
    127.0.0.0/8 (a network client, an IPv6 /64): 16 loopback addresses x 2 unary calls of 47 MiB
    held +1.0-1.5 GB uncounted, 16 addresses x 1 stream +1 GB."""

    def __init__(self, limit: int, total: int = 0, budget: ReceiveBudget | None = None) -> None:
        self.limit = limit
        self.total = total
        self.held = 0
        self.budget = budget or ReceiveBudget()
        self.budget.pools.append(self)
        self._receiving: dict[str, int] = {}
        self._waiting: dict[str, collections.deque[asyncio.Future[None]]] = {}

    def full(self) -> bool:
        """All peers together hold every turn of this pool, or of the budget."""
        return (bool(self.total) and self.held >= self.total) or self.budget.full()

    def peer_full(self, peer: str) -> bool:
        return self._receiving.get(peer, 0) >= self.limit

    def enter_now(self, peer: str) -> bool:
        """Take a turn if one is free (the usual case: no suspension on the hot path)."""
        if self.peer_full(peer) or self.full():
            return False
        self._take(peer)
        return True

    def _take(self, peer: str) -> None:
        self._receiving[peer] = self._receiving.get(peer, 0) + 1
        self.held += 1
        self.budget.held += 1
        log.debug("a gRPC message of %s is received in its turn", peer)  # tests see who holds the turns

    async def wait(self, peer: str) -> None:
        """Wait for a turn that ``leave`` hands over (counted as this peer's when handed over)."""
        log.debug("a gRPC message of %s waits for its turn to be received", peer)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(peer, collections.deque())
        queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed over just as the call was cancelled
                self.leave(peer)
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(turn)
                if not queue and self._waiting.get(peer) is queue:
                    del self._waiting[peer]
            raise

    def leave(self, peer: str) -> None:
        """A message has arrived (or its call ended): hand the turn to the next waiting call."""
        left = self._receiving[peer] - 1
        if left:
            self._receiving[peer] = left
        else:
            del self._receiving[peer]
        self.held -= 1
        self.budget.held -= 1
        self.budget.hand_over()

    def hand_over(self) -> bool:
        """Give a free turn to the first waiting peer (longest waiting since it was last served)
        that is under its own limit; whether one took it."""
        if not self._waiting or self.full():
            return False
        for peer in list(self._waiting):
            if self.peer_full(peer):
                continue
            queue = self._waiting.pop(peer)
            while queue:
                turn = queue.popleft()
                if not turn.done():
                    turn.set_result(None)
                    self._take(peer)
                    if queue:
                        self._waiting[peer] = queue  # to the back: the other peers come first
                    return True
        return False


class Turn:
    """One call's claim on a turn of its peer: ``take`` waits for it, ``end`` gives it back (once,
    however often called, and only if it was taken)."""

    __slots__ = ("turns", "peer", "taken")

    def __init__(self, turns: PeerTurns, peer: str) -> None:
        self.turns = turns
        self.peer = peer
        self.taken = False

    async def take(self) -> None:
        if not self.turns.enter_now(self.peer):
            await self.turns.wait(self.peer)  # cancelled: no turn is kept (wait sees to that)
        self.taken = True

    def end(self) -> None:
        if self.taken:
            self.taken = False
            self.turns.leave(self.peer)


#: The stream the running call is (set by the guard for a stream of a peer).
current_stream: contextvars.ContextVar[StreamActivity | None] = contextvars.ContextVar(
    "ferry_grpc_stream", default=None
)


class StreamActivity:
    """When a stream last had traffic (a request received or a response sent), and how to end it."""

    __slots__ = ("context", "task", "last", "ended")

    def __init__(self, context: grpc.aio.ServicerContext, task: asyncio.Task[Any] | None) -> None:
        self.context = context
        self.task = task  # grpc's task for the call: ExpectedFailures knows an ended call by it
        self.last = time.monotonic()
        self.ended = False

    def responded(self) -> None:
        self.last = time.monotonic()


class StreamTurns:
    """At most ``per_peer`` streams of one peer, and ``total`` of all peers, waiting for a request
    message at once (see the module docstring); ``idle_timeout``: when one idle on a turn gives way
    to a waiting one (of its address; of any address when the waiting one is held up by ``total``)."""

    def __init__(
        self,
        per_peer: int,
        idle_timeout: float,
        expected: set[object],
        total: int = 0,
        budget: ReceiveBudget | None = None,
    ) -> None:
        self.turns = PeerTurns(per_peer, total, budget)
        self.idle_timeout = idle_timeout
        self.expected = expected  # calls whose failed writes grpc.aio logs, expected (grpc_calls.py)
        self.period = min(1.0, idle_timeout / SWEEPS_PER_TIMEOUT)
        self._holders: dict[str, set[StreamActivity]] = {}
        self._waiting: dict[str, dict[StreamActivity, float]] = {}  # peer -> stream -> waiting since
        self._sweep: asyncio.TimerHandle | None = None

    async def messages(self, peer: str, stream: StreamActivity) -> AsyncIterator[Any]:
        """The stream's request messages, each asked for in a turn of ``peer``. The turn ends once
        the message has arrived: its handler counts it from its bytes before anything else."""
        context = stream.context
        turn = Turn(self.turns, peer)
        while True:
            await self._take(peer, stream, turn)
            try:
                holders = self._holders.setdefault(peer, set())
                holders.add(stream)
                try:
                    message = await context.read()
                finally:
                    holders.discard(stream)
                    if not holders and self._holders.get(peer) is holders:
                        del self._holders[peer]
                if message is grpc.aio.EOF:
                    return
                stream.last = time.monotonic()
                turn.end()
                held = [message]
                del message  # not kept by this frame while the stream serves it
                yield held.pop()
            finally:
                turn.end()

    async def _take(self, peer: str, stream: StreamActivity, turn: Turn) -> None:
        """Take ``turn``; a stream that must wait is seen by the sweep for idle holders."""
        if self.turns.enter_now(peer):
            turn.taken = True
            return
        waiting = self._waiting.setdefault(peer, {})
        waiting[stream] = time.monotonic()
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._end_idle)
        try:
            await turn.take()  # cancelled: no turn is kept
        finally:
            del waiting[stream]
            if not waiting and self._waiting.get(peer) is waiting:
                del self._waiting[peer]

    def closed(self, stream: StreamActivity) -> None:
        """The stream is over: an ended one's failed writes need no longer be excused."""
        if stream.ended:
            self.expected.discard(stream.task)

    def _end_idle(self) -> None:
        """End, for each address whose streams have waited a sweep period for a turn, the stream
        idle longest on a turn it waits for, if that is ``idle_timeout`` or more: one of its own
        address, or of any address when all of them together hold every turn."""
        now = time.monotonic()
        for peer, waiting in list(self._waiting.items()):
            if not waiting or now - min(waiting.values()) < self.period:
                continue  # (a busy holder's turn is about to come free)
            everyone = not self.turns.peer_full(peer)
            holders = [
                (holder, stream)
                for holder, streams in self._holders.items()
                if everyone or holder == peer
                for stream in streams
                if not stream.ended and now - stream.last >= self.idle_timeout
            ]
            if holders:
                holder, stream = min(holders, key=lambda pair: pair[1].last)
                self._end(holder, stream, now, everyone)
        self._sweep = None
        if self._waiting:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._end_idle)

    def _end(self, peer: str, stream: StreamActivity, now: float, everyone: bool) -> None:
        turns = (
            f"the {self.turns.total} stream turns of all clients while a stream of another address waited "
            "(--grpc-receive-bytes over --grpc-max-message-bytes"
            if everyone
            else f"the {self.turns.limit} message turns of {peer} while another stream of that address waited "
            "(--grpc-stream-reads-per-peer"
        )
        details = f"the stream was idle for {now - stream.last:.0f} s holding one of {turns}, --grpc-idle-stream-secs)"
        stream.ended = True
        self.expected.add(stream.task)
        if grpc_cancel.end_call(stream.context, grpc.StatusCode.UNAVAILABLE, details):
            log.warning("ended a gRPC stream of %s: %s", peer, details)
            return
        self.expected.discard(stream.task)
        log.error("could not end an idle gRPC stream of %s: this grpcio offers no way to end one call", peer)
