"""Per-peer call limits and a deadline for the request message of every gRPC call.

``--grpc-max-concurrent-rpcs`` bounds unfinished calls server-wide, so alone it lets one client
that opens thousands of calls and never finishes them hold every slot: everyone else is refused.
``CallGuard`` wraps each method handler of the service, so it sees each call as it arrives (before
its request message), and adds

- a cap on the unfinished calls of one peer address (``max_calls_per_peer``): past it that peer's
  new calls get RESOURCE_EXHAUSTED at once, other peers keep their share of the server-wide cap;
- a deadline for a unary call's request message (``request_timeout``): a call whose message never
  completes (headers sent, data withheld) is ended with DEADLINE_EXCEEDED and frees its slot.

- answers held until written: a unary call is served as a stream-unary call that reads one message
  (the same bytes on the wire, so clients cannot tell; it lets the guard see the call before its
  message arrives). grpc ends the call, and runs its done callbacks, once the answer has been
  written to the connection (or the call is gone); what the handler asked to keep until then
  (``release_after_write``: its admission, with the answer's bytes) is released there, so
  ``--max-inflight-bytes`` counts answers a client has not taken. (Serving the call as a stream
  that yields its one answer does the same at about 12% more CPU per tiny request.)
- a deadline for each response message (``write_timeout`` plus one second per MiB): a client that
  has not taken it by then has its connection closed (``peer_sockets.py``), which ends its calls
  and frees their answers. grpc itself offers no way to end a call whose message it is writing.

Streaming calls count against the peer cap for as long as they are open (a stream may rightly stay
idle between requests).

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

from .peer_sockets import close_peer_connections

log = logging.getLogger(__name__)

#: Time allowed to write a response message, on top of the timeout: one second per MiB (1 MiB/s).
WRITE_BYTES_PER_SEC = 1024 * 1024

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


#: How often waiting request messages are checked, as a share of the deadline (at most once a second).
SWEEPS_PER_TIMEOUT = 4


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

    async def first_message(self, context: grpc.aio.ServicerContext) -> Any:
        """The call's one request message, or the call aborted when it has not arrived in time.

        Read with ``context.read()``, not by iterating the request iterator grpc passes: that
        builds an async generator per call, which keeps the last message it read until closed."""
        task = asyncio.current_task()
        assert task is not None
        self._waiting[task] = time.monotonic() + self.timeout
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._expire_late)
        message: Any = grpc.aio.EOF
        expired = False
        try:
            message = await context.read()
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


class WriteDeadlines:
    """Closes the connection of a client that does not take a response message in time: one sweep
    for every message being written (``ports``: the listening ports whose connections may be closed).

    A message's size (which sets its allowance) is looked at only once the plain timeout has
    passed: ``ByteSize()`` serialises the whole message under protobuf's upb runtime, too costly to
    pay on every call for the rare one that is late."""

    def __init__(self, timeout: float, ports: Collection[int] = ()) -> None:
        self.timeout = timeout
        self.ports = ports
        self.period = min(1.0, timeout / SWEEPS_PER_TIMEOUT)
        self._writing: dict[object, _Write] = {}
        self._sweep: asyncio.TimerHandle | None = None

    def watch(self, key: object, peer: str, response: Any) -> bool:
        """Start timing ``response``'s write to ``peer`` (grpc's peer string; ``done(key)`` once
        written); False for calls never cut: those of this server's own intake processes (a unix socket)."""
        if not self.ports or not peer_host(peer):
            return False
        self._writing[key] = _Write(time.monotonic(), peer, response)
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.period, self._cut_late)
        return True

    def done(self, key: object) -> None:
        self._writing.pop(key, None)

    def _cut_late(self) -> None:
        now = time.monotonic()
        loop = asyncio.get_running_loop()
        for key, write in list(self._writing.items()):
            if now - write.start < self.timeout:
                continue
            if write.allowed is None:  # first time past the plain timeout: add the size's allowance
                write.allowed = self.timeout + write.response.ByteSize() / WRITE_BYTES_PER_SEC
                write.response = None
            if now - write.start >= write.allowed:
                del self._writing[key]  # off the loop: it reads this process's descriptors
                closing = loop.run_in_executor(None, close_peer_connections, write.peer, tuple(self.ports))
                closing.add_done_callback(functools.partial(_report_cut, write.peer, write.allowed))
        self._sweep = None
        if self._writing:
            self._sweep = loop.call_later(self.period, self._cut_late)


class _Write:
    """A response message being written: since when, to whom, and its allowance once known."""

    __slots__ = ("start", "peer", "response", "allowed")

    def __init__(self, start: float, peer: str, response: Any) -> None:
        self.start = start
        self.peer = peer
        self.response = response
        self.allowed: float | None = None


def _report_cut(peer: str, allowed: float, closing: asyncio.Future[int]) -> None:
    if closing.exception() is not None:
        log.error("could not close the gRPC connection of %s: %s", peer, closing.exception())
        return
    log.warning(
        "closed %d gRPC connection(s) of %s: a response was not taken within %.0f s (--grpc-write-timeout-secs)",
        closing.result(),
        peer,
        allowed,
    )


class CallGuard:
    """Counts unfinished calls per peer address, times request and response messages, and holds
    what a unary call asks to keep until its answer is written (see the module docstring)."""

    def __init__(self, max_calls_per_peer: int, request_timeout: float, write_timeout: float) -> None:
        self.max_calls_per_peer = max_calls_per_peer
        self.deadlines = MessageDeadlines(request_timeout)
        self.writes = WriteDeadlines(write_timeout)
        self.calls: dict[str, int] = {}

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
        writes = self.writes

        async def unary(_: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            peer = context.peer()
            host = await self._enter(peer, context)
            pending: list[Callable[[], object]] = []
            _after_write.set(pending)  # in this call's own task context: never reset
            try:
                # the message goes to the handler without a name here to keep it alive after use
                response = await behaviour(await first_message(context), context)
            except BaseException:
                self._finish(pending, host, None)
                raise
            key = object()  # this call's write deadline
            watched = key if writes.watch(key, peer, response) else None
            # grpc ends the call (and calls this) once the answer is written, or the call is gone
            done: Any = lambda _: self._finish(pending, host, watched)  # noqa: E731 (the stubs type grpc's sync callback)
            context.add_done_callback(done)
            return response

        return grpc.stream_unary_rpc_method_handler(
            unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

    def _guard_bidi(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        streaming: Any = handler.stream_stream

        writes = self.writes

        async def bidi(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            peer = context.peer()
            host = await self._enter(peer, context)
            key = object()
            try:
                async for response in streaming(requests, context):
                    watched = writes.watch(key, peer, response)
                    try:
                        yield response  # resumes once grpc has written it
                    finally:
                        if watched:
                            writes.done(key)
            finally:
                self._leave(host)

        return grpc.stream_stream_rpc_method_handler(
            bidi, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

    def _finish(self, pending: list[Callable[[], object]], peer: str, watched: object | None) -> None:
        """A unary call is over (answer written, failed or cancelled): release what it held."""
        if watched is not None:
            self.writes.done(watched)
        for release in pending:
            release()
        pending.clear()
        self._leave(peer)

    async def _enter(self, full_peer: str, context: grpc.aio.ServicerContext) -> str:
        """Count a call of ``full_peer`` (grpc's peer string); returns its address ("" for calls
        never counted)."""
        peer = peer_host(full_peer)
        if not peer:
            return peer
        held = self.calls.get(peer, 0)
        if held >= self.max_calls_per_peer:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many unfinished calls from {peer} (limit {self.max_calls_per_peer}, --grpc-max-calls-per-peer)",
            )
        self.calls[peer] = held + 1
        return peer

    def _leave(self, peer: str) -> None:
        if not peer:
            return
        left = self.calls[peer] - 1
        if left:
            self.calls[peer] = left
        else:
            del self.calls[peer]


HandlerWrapper = Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler]


class WrappedRegistration:
    """Stands in for the server when the generated ``add_..._to_server`` registers a service, and
    registers every method handler through ``wrap(handler, "/package.Service/Method")`` instead."""

    def __init__(self, server: grpc.aio.Server, wrap: HandlerWrapper) -> None:
        self._server = server
        self._wrap = wrap
        self._services: set[str] = set()

    def add_generic_rpc_handlers(self, generic_handlers: Any) -> None:
        """Ignored: the generated code registers the same handlers by name next (below)."""

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        wrapped = {name: self._wrap(handler, f"/{service}/{name}") for name, handler in handlers.items()}
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))
        self._server.add_registered_method_handlers(service, wrapped)
        self._services.add(service)

    def check_registered(self, service: str) -> None:
        """Fails loudly if generated code ever stops registering by name (nothing would be served)."""
        if service not in self._services:
            raise RuntimeError(f"the generated code did not register {service}'s method handlers by name")
