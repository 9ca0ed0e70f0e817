"""Per-peer call limits, and deadlines for the request and response messages of every gRPC call.

``--grpc-max-concurrent-rpcs`` bounds unfinished calls server-wide, so alone it lets one client
that opens thousands of calls and never finishes them hold every slot: everyone else is refused.
``CallGuard`` wraps each method handler of the service, so it sees each call as it arrives (before
its request message). It counts the calls it holds against that cap itself (``max_calls``, the
process's share): grpc counts refused calls too until their status is sent, so with grpc's limit
as the cap, one address's burst of refused calls made grpc refuse other clients for an instant
(grpc's own limit now sits above, ``grpc_limits.REFUSALS_IN_FLIGHT``). And it adds

- a cap on the unfinished calls of one peer address (``max_calls_per_peer``, at most half of the
  process's share of the server-wide cap: ``front_doors.grpc_limits``): past it that peer's new
  calls get RESOURCE_EXHAUSTED at once, other peers keep their share of the server-wide cap;
- a deadline for a unary call's request message (``request_timeout``): a call whose message never
  completes (headers sent, data withheld) is ended with DEADLINE_EXCEEDED and frees its slot; and
  one for a stream's first message (``stream_first_message_timeout``, ``FirstMessageDeadlines``):
  a stream opened that never sends a request held its slot for as long as its connection lived.
- turns for receiving request messages (``grpc_turns.py``): grpc reads a message whole, and parses
  it, before admission can see its size, so one client sending many large calls at once had them
  all in memory, uncounted (16 x 64 MiB: +1 GB). A unary call asks for its message only in its
  peer's turn, at most ``reads_per_peer`` at a time (the wait counts against the message's
  deadline); a stream asks for each of its messages in a turn of a pool of its own
  (``stream_reads_per_peer``, 0 for none), and one idle on a turn for ``idle_stream_timeout`` is
  ended once another stream of its address waits. All peers together hold at most ``reads_total``
  turns of both kinds (one ``ReceiveBudget``), streams at most ``stream_reads_total`` of them.

- answers held until written: a unary call is served as a stream-unary call that reads one message
  (the same bytes on the wire, so clients cannot tell; it lets the guard see the call before its
  message arrives). grpc ends the call, and runs its done callbacks, once the answer has been
  written to the connection (or the call is gone); what the handler asked to keep until then
  (``release_after_write``: its admission, with the answer's bytes) is released there, so
  ``--max-inflight-bytes`` counts answers a client has not taken. (Serving the call as a stream
  that yields its one answer does the same at about 12% more CPU per tiny request.)
- a deadline for each response message (``write_timeout`` plus one second per MiB): a call whose
  client has not taken it by then is ended alone (``grpc_cancel.py``: grpc core cancels it, its
  stream gets DEADLINE_EXCEEDED and RST_STREAM, its answer is freed and its done callbacks run),
  unary or streamed; the client's other calls on the same connection go on. Only as a fallback,
  when this grpcio gives no way to end one call or the ended call is still not over
  ``END_GRACE_S`` (5 s) later, is the client's connection closed (``peer_sockets.py``). Calls of
  this server's own intake processes (a unix socket) are never ended: they wait on their client.

The unary calls accepted before the shutdown began are counted until their answers are written
(``DrainCutoff.unanswered``): grpc's shutdown, which closes each connection after its last call,
waits for them (``grpc.stop_serving``).

Streaming calls count against the peer cap for as long as they are open (a stream may rightly stay
idle between requests, though not on a turn others wait for).

grpc.aio means to ignore a write that failed because the call was cancelled, but logs an ERROR with
a traceback when the failure reaches the handler before grpc has marked the call as cancelled (the
usual order when a call is cancelled while its answer is being written: one per stream a client
cancelled mid-answer). ``ExpectedFailures`` drops that record for the calls where it is expected:
unary calls ended here, and every stream (a stream's write fails only when its client is gone,
cancelled or disconnected, or when an intake process relaying it cancels it, which it does only
when its own caller is gone or was ended).

Why wrap the handlers once at registration, not a ``grpc.aio.ServerInterceptor``: an interceptor is
awaited on every call and would build a new handler each time; the benchmark of the tiny model
(benchmarks/intake.py) measured that at about 10% of the server's CPU per gRPC request. For the same
reason the deadlines (of request and of response messages) share periodic sweeps instead of a timer
per call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import grpc

from . import grpc_cancel
from .drain_cutoff import DrainCutoff
from .grpc_turns import SWEEPS_PER_TIMEOUT, PeerTurns, ReceiveBudget, StreamActivity, StreamTurns, Turn, current_stream
from .peer_sockets import close_peer_connections

log = logging.getLogger(__name__)

#: Time allowed to write a response message, on top of the timeout: one second per MiB (1 MiB/s).
WRITE_BYTES_PER_SEC = 1024 * 1024

#: How long a call ended for a late response may take to be over before its connection is closed.
END_GRACE_S = 5.0

#: What the running call releases once its response is written (None: not a guarded call).
_after_write: contextvars.ContextVar[list[Callable[[], object]] | None] = contextvars.ContextVar(
    "ferry_grpc_after_write", default=None
)


def release_after_write(release: Callable[[], object]) -> None:
    """Call ``release`` once grpc has written this unary call's response (or the call ended);
    at once when the call is not served through ``CallGuard``."""
    pending = _after_write.get()
    if pending is None:
        release()
    else:
        pending.append(release)


class ExpectedFailures(logging.Filter):
    """Drops grpc.aio's ERROR about the failed write of a call in ``calls``: a unary call is known
    by its list of releases (``_after_write``, still set in grpc's task for the call), a stream by
    grpc's task for it; whoever adds one removes it once its call is over. Every open stream is in
    ``streams`` too (grpc's task for it, while the guard serves it)."""

    calls: set[object] = set()  # id() of a unary call's releases, or a stream's task
    streams: set[object] = set()  # grpc's tasks of the open streams

    def filter(self, record: logging.LogRecord) -> bool:
        calls, streams = self.calls, self.streams
        if (
            not (calls or streams)
            or record.levelno != logging.ERROR
            or not str(record.msg).startswith("ExecuteBatchError")
        ):
            return True
        held = _after_write.get()
        if held is not None and id(held) in calls:
            return False
        try:
            task = asyncio.current_task()
        except RuntimeError:  # logged outside a running loop
            return True
        return task not in calls and task not in streams


logging.getLogger("grpc._cython.cygrpc").addFilter(ExpectedFailures())
_expected = ExpectedFailures.calls
_streams = ExpectedFailures.streams


def peer_host(peer: str) -> str:
    """The address part of grpc's peer string ("ipv4:1.2.3.4:5678", "ipv6:[::1]:5678"); "" for a
    unix socket, whose only clients are this server's own intake processes (not counted)."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0]
    return ""


class MessageDeadlines:
    """Ends calls whose request message has not arrived in time: one sweep for all of them.

    Everything runs on the server's event loop, so plain dicts are the state."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.period = min(1.0, timeout / SWEEPS_PER_TIMEOUT)
        self._waiting: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._sweep: asyncio.TimerHandle | None = None

    async def first_message(self, context: grpc.aio.ServicerContext, turn: Turn | None = None) -> Any:
        """The call's one request message, or the call aborted when it has not arrived in time.

        With a ``turn``, the message is asked for only once the turn is taken (the wait counts
        against the deadline), and the turn ends once the message is read. The handler it goes to
        runs at once, with no suspension before ModelInfer counts the message from its bytes
        (``grpc_decode``'s ``count``), so the next message of the peer never starts arriving while
        this one is uncounted. Read with ``context.read()``, not by iterating the request iterator
        grpc passes: that builds an async generator per call, which keeps the last message it read
        until closed."""
        task = asyncio.current_task()
        assert task is not None
        self._waiting[task] = time.monotonic() + self.timeout
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._expire_late)
        message: Any = grpc.aio.EOF
        expired = False
        try:
            if turn is None:
                message = await context.read()
            else:
                await turn.take()
                try:
                    message = await context.read()
                finally:
                    turn.end()
        except asyncio.CancelledError:
            if task not in self._expired:
                raise
            if hasattr(task, "uncancel"):  # Python 3.11+
                task.uncancel()
            expired = True
        finally:
            del self._waiting[task]
            self._expired.discard(task)
        if expired:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the request message did not arrive within {self.timeout:g} s (--grpc-request-timeout-secs)",
            )
        if message is grpc.aio.EOF:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")
        return message

    def _expire_late(self) -> None:
        now = time.monotonic()
        for task, deadline in list(self._waiting.items()):
            if deadline <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()
        self._sweep = None
        if self._waiting:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._expire_late)


class FirstMessageDeadlines:
    """Ends streams whose first request message has not arrived ``timeout`` seconds after they
    began (waiting for a message turn included, as for a unary call's message): one sweep for all.

    After its first message a stream may rightly stay idle (``grpc_turns`` ends one idle on a turn
    others wait for); before it, it is a call slot held for nothing. Like an idle stream, one
    ended here is ended alone in grpc core (``grpc_cancel.end_call``), with DEADLINE_EXCEEDED."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.period = min(1.0, timeout / SWEEPS_PER_TIMEOUT)
        self._waiting: dict[object, tuple[float, grpc.aio.ServicerContext, str]] = {}
        self._sweep: asyncio.TimerHandle | None = None

    async def messages(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, token: object, peer: str
    ) -> AsyncIterator[Any]:
        """``requests``, with the stream timed until the first arrives (``token``: grpc's task for
        the call, as ``ExpectedFailures`` knows it). Keeps no message between two."""
        self._waiting[token] = (time.monotonic() + self.timeout, context, peer)
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._end_late)
        try:
            async for message in requests:
                self._waiting.pop(token, None)
                held = [message]
                del message
                yield held.pop()
        finally:
            self._waiting.pop(token, None)

    def _end_late(self) -> None:
        now = time.monotonic()
        for token, (deadline, context, peer) in list(self._waiting.items()):
            if deadline > now:
                continue
            del self._waiting[token]
            details = (
                f"the stream's first request message did not arrive within {self.timeout:g} s "
                "(--grpc-stream-first-message-secs)"
            )
            _expected.add(token)  # its failed writes, if any, are expected (the bidi guard forgets it)
            if grpc_cancel.end_call(context, grpc.StatusCode.DEADLINE_EXCEEDED, details):
                log.warning("ended a gRPC stream of %s: %s", peer, details)
            else:
                _expected.discard(token)
                log.error("could not end a gRPC stream of %s: this grpcio offers no way to end one call", peer)
        self._sweep = None
        if self._waiting:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._end_late)


class WriteDeadlines:
    """Ends the call of a client that does not take a response message in time: one sweep for
    every message being written (``ports``: the listening ports whose connections the fallback may
    close).

    The call alone is ended (``grpc_cancel.end_call``): its stream gets DEADLINE_EXCEEDED and
    RST_STREAM, grpc frees its answer, the client's other calls on the connection go on. Only when
    that is not possible, or the call is still not over ``end_grace`` seconds later, is the
    client's whole connection closed (``peer_sockets.py``).

    A message's size (which adds to its allowance) is looked at only once the plain timeout has
    passed: ``ByteSize()`` serialises the whole message under protobuf's upb runtime, too costly to
    pay on every call for the rare one that is late."""

    def __init__(self, timeout: float, ports: Collection[int] = (), end_grace: float = END_GRACE_S) -> None:
        self.timeout = timeout
        self.ports = ports
        self.end_grace = end_grace
        self.period = min(1.0, timeout / SWEEPS_PER_TIMEOUT)
        self._writing: dict[object, _Write] = {}
        # key -> when to close the connection instead, peer, time allowed, the call's token
        self._ending: dict[object, tuple[float, str, float, object]] = {}
        self._sweep: asyncio.TimerHandle | None = None

    def watch(self, key: object, context: grpc.aio.ServicerContext, token: object, response: Any) -> None:
        """Start timing the write of ``response``, of ``context``'s call (``token``: the call as
        ``ExpectedFailures`` knows it); ``done(key)`` once written."""
        self._writing[key] = _Write(time.monotonic(), context, token, response, self.timeout)
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._sweep_late)

    def done(self, key: object) -> None:
        """The message was written, or its call is over."""
        self._writing.pop(key, None)
        if self._ending and key in self._ending:
            _expected.discard(self._ending.pop(key)[3])

    def _sweep_late(self) -> None:
        now = time.monotonic()
        for key, write in list(self._writing.items()):
            if now - write.start < self.timeout:
                continue
            if write.response is not None:  # first time past the plain timeout: add the size's allowance
                response = write.response  # a message, or bytes a relay passes through
                size = len(response) if isinstance(response, bytes) else response.ByteSize()
                write.allowed += size / WRITE_BYTES_PER_SEC
                write.response = None
            if now - write.start >= write.allowed:
                del self._writing[key]
                self._end(key, write.context, write.token, write.allowed, now)
        for key, (closing_at, peer, allowed, token) in list(self._ending.items()):
            if closing_at <= now:
                del self._ending[key]
                _expected.discard(token)
                self._close(peer, allowed, f"its call was still not over {self.end_grace:g} s after it was ended")
        self._sweep = None
        if self._writing or self._ending:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._sweep_late)

    def _end(self, key: object, context: grpc.aio.ServicerContext, token: object, allowed: float, now: float) -> None:
        peer = context.peer()
        details = f"the response was not taken within {allowed:.0f} s (--grpc-write-timeout-secs)"
        _expected.add(token)
        if not grpc_cancel.end_call(context, grpc.StatusCode.DEADLINE_EXCEEDED, details):
            _expected.discard(token)
            self._close(peer, allowed, "grpc offered no way to end the call alone")
            return
        log.warning("ended a gRPC call of %s: %s", peer, details)
        self._ending[key] = (now + self.end_grace, peer, allowed, token)

    def _close(self, peer: str, allowed: float, why: str) -> None:
        """The fallback: close the client's connection(s) (off the loop: it reads this process's descriptors)."""
        closing = asyncio.get_running_loop().run_in_executor(None, close_peer_connections, peer, tuple(self.ports))
        closing.add_done_callback(functools.partial(_report_close, peer, allowed, why))


class _Write:
    """A response message being written: since when, its call (context and ExpectedFailures token),
    the time it is allowed, and the message itself until its size has been added to that."""

    __slots__ = ("start", "context", "token", "response", "allowed")

    def __init__(
        self, start: float, context: grpc.aio.ServicerContext, token: object, response: Any, allowed: float
    ) -> None:
        self.start = start
        self.context = context
        self.token = token
        self.response: Any = response
        self.allowed = allowed


def _report_close(peer: str, allowed: float, why: str, closing: asyncio.Future[int]) -> None:
    if closing.exception() is not None:
        log.error("could not close the gRPC connection of %s: %s", peer, closing.exception())
        return
    log.warning(
        "closed %d gRPC connection(s) of %s: a response was not taken within %.0f s (--grpc-write-timeout-secs) and %s",
        closing.result(),
        peer,
        allowed,
        why,
    )


class CallGuard:
    """Counts unfinished calls per peer address, times request and response messages, and holds
    what a unary call asks to keep until its answer is written (see the module docstring)."""

    def __init__(
        self,
        max_calls_per_peer: int,
        max_calls: int,
        request_timeout: float,
        write_timeout: float,
        reads_per_peer: int = 2,
        stream_reads_per_peer: int = 8,
        idle_stream_timeout: float = 60.0,
        reads_total: int = 0,
        stream_reads_total: int = 0,
        cutoff: DrainCutoff | None = None,
        stream_first_message_timeout: float = 60.0,
    ) -> None:
        self.max_calls_per_peer = max_calls_per_peer
        self.cutoff = cutoff or DrainCutoff()  # unary calls still running when the drain ends
        self.budget = ReceiveBudget(reads_total)  # every kind of turn: unary first, then streams
        self.turns = PeerTurns(reads_per_peer, reads_total, self.budget)
        self.stream_turns = (
            StreamTurns(stream_reads_per_peer, idle_stream_timeout, _expected, stream_reads_total, self.budget)
            if stream_reads_per_peer
            else None
        )
        self.deadlines = MessageDeadlines(request_timeout)
        self.first_messages = FirstMessageDeadlines(stream_first_message_timeout)
        self.writes = WriteDeadlines(write_timeout)
        self.max_calls = max_calls
        self.calls: dict[str, int] = {}
        self.held = 0  # every peer's calls together

    @property
    def ports(self) -> Collection[int]:
        return self.writes.ports

    @ports.setter
    def ports(self, ports: Collection[int]) -> None:
        """The listening ports (set once bound) whose connections a stalled write may close."""
        self.writes.ports = ports

    def wrap(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """The guarded form of one method's handler (built once, when the service is registered)."""
        if not handler.request_streaming and not handler.response_streaming:
            return self._guard_unary(handler)
        if handler.request_streaming and handler.response_streaming:
            return self._guard_bidi(handler)
        return handler  # the inference service has no other kinds of RPC

    def _guard_unary(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        behaviour: Any = handler.unary_unary
        first_message = self.deadlines.first_message
        turns = self.turns

        writes = self.writes
        cutoff = self.cutoff
        answer_written: Any = self._answer_written  # the stubs type grpc's sync callback as a class

        async def unary(_: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            peer = await self._enter(context)
            if not cutoff.closing:  # accepted before the shutdown began: grpc's waits for its answer
                cutoff.unanswered += 1
                context.add_done_callback(answer_written)
            pending: list[Callable[[], object]] = []
            # left set: grpc's task for this call ends with it, and ExpectedFailures knows the call by it;
            # a context variable: grpc calls the servicer with (message, context) only
            _after_write.set(pending)
            # this server's own intakes (no peer) take no turns: each gates its own clients
            turn = Turn(turns, peer) if peer else None
            task: Any = asyncio.current_task()  # grpc's task for the call
            cutoff.tasks.add(task)
            try:
                # the message goes to the handler without a name here to keep it alive after use
                response = await behaviour(await first_message(context, turn), context)
            except asyncio.CancelledError:
                self._finish(pending, peer, None)
                error = cutoff.taken(task)
                if error is None:
                    raise
                await context.abort(grpc.StatusCode.UNAVAILABLE, error.message)
            except BaseException:
                self._finish(pending, peer, None)
                raise
            finally:
                cutoff.tasks.discard(task)
            watched = None
            if peer:  # not this server's own intake processes (a unix socket): their calls are never ended
                watched = object()  # this call's write deadline
                writes.watch(watched, context, id(pending), response)
            # grpc ends the call (and calls this) once the answer is written, or the call is gone
            done: Any = lambda _: self._finish(pending, peer, watched)  # noqa: E731 (the stubs type grpc's sync callback)
            context.add_done_callback(done)
            return response

        return grpc.stream_unary_rpc_method_handler(
            unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

    def _guard_bidi(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        streaming: Any = handler.stream_stream

        writes = self.writes

        stream_turns = self.stream_turns
        first_messages = self.first_messages

        async def bidi(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            peer = await self._enter(context)
            key = object()
            task = asyncio.current_task()  # grpc's task for the call: it iterates this generator
            stream = None
            if peer and stream_turns is not None:  # its messages are asked for in its peer's stream turns
                stream = StreamActivity(context, task)
                requests = stream_turns.messages(peer, stream)
                current_stream.set(stream)  # a context variable: grpc calls the servicer with (message, context) only
            if peer:  # this server's own intakes (no peer) send their first message at once
                requests = first_messages.messages(requests, context, task, peer)
            # a stream's write fails only when its client is gone (cancelled, reset, disconnected):
            # grpc's ERROR with a traceback for that is dropped
            _streams.add(task)
            try:
                async for response in streaming(requests, context):
                    if peer:  # not this server's own intake processes (see unary)
                        writes.watch(key, context, task, response)
                    try:
                        yield response  # resumes once grpc has written it
                    finally:
                        writes.done(key)
                        if stream is not None:
                            stream.responded()
            finally:
                self._leave(peer)
                if stream is not None and stream_turns is not None:
                    stream_turns.closed(stream)
                _streams.discard(task)
                _expected.discard(task)  # ended for a late first message: over now

        return grpc.stream_stream_rpc_method_handler(
            bidi, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

    def _answer_written(self, _: object) -> None:
        """A unary call accepted before the shutdown is over (its answer or error written, or the call gone)."""
        self.cutoff.answer_written()

    def _finish(self, pending: list[Callable[[], object]], peer: str, watched: object | None) -> None:
        """A unary call is over (answer written, failed or cancelled): release what it held."""
        if watched is not None:
            self.writes.done(watched)
        for release in pending:
            release()
        pending.clear()
        self._leave(peer)

    async def _enter(self, context: grpc.aio.ServicerContext) -> str:
        peer = peer_host(context.peer())
        if not peer:
            return peer
        held = self.calls.get(peer, 0)
        if held >= self.max_calls_per_peer:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many unfinished calls from {peer} (limit {self.max_calls_per_peer}, --grpc-max-calls-per-peer)",
            )
        if self.held >= self.max_calls:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many unfinished calls (limit {self.max_calls} per process, --grpc-max-concurrent-rpcs)",
            )
        self.calls[peer] = held + 1
        self.held += 1
        return peer

    def _leave(self, peer: str) -> None:
        if not peer:
            return
        self.held -= 1
        left = self.calls[peer] - 1
        if left:
            self.calls[peer] = left
        else:
            del self.calls[peer]
        # tests see the slot come back (a call ended in grpc core is answered before this runs)
        log.debug("a gRPC call of %s is over: its slot is free", peer)


HandlerWrapper = Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler]


class WrappedRegistration:
    """Stands in for the server when the generated ``add_..._to_server`` registers a service, and
    registers every method handler through ``wrap(handler, "/package.Service/Method")`` instead.

    The service goes to grpc as one generic handler, not by name: grpc.aio's serving loop keeps one
    posted call per method registered by name and, for every call that arrives, waits on all of
    them again (``asyncio.wait`` over 21 futures for the inference service, a done callback added
    and removed on each: 150 of 819 Python calls per tiny-model request, 0.92x the server's CPU
    per request without them). A generic handler is one posted call and one dict lookup."""

    def __init__(self, server: grpc.aio.Server, wrap: HandlerWrapper) -> None:
        self._server = server
        self._wrap = wrap
        self._services: set[str] = set()

    def add_generic_rpc_handlers(self, generic_handlers: Any) -> None:
        """Ignored: the generated code passes the same handlers by name next (below)."""

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        wrapped = {name: self._wrap(handler, f"/{service}/{name}") for name, handler in handlers.items()}
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))
        self._services.add(service)

    def check_registered(self, service: str) -> None:
        """Fails loudly if generated code ever stops passing handlers by name (nothing would be served)."""
        if service not in self._services:
            raise RuntimeError(f"the generated code did not register {service}'s method handlers by name")
