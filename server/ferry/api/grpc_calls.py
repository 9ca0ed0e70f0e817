"""Per-peer call limits, a deadline for the request message of every gRPC call, and answers
held until written.

``--grpc-max-concurrent-rpcs`` bounds unfinished calls server-wide, so alone it lets one client
that opens thousands of calls and never finishes them hold every slot: everyone else is refused.
This interceptor, which sees each call as it arrives (before its request message), adds

- a cap on the unfinished calls of one peer address (``max_calls_per_peer``): past it that peer's
  new calls get RESOURCE_EXHAUSTED at once, other peers keep their share of the server-wide cap;
- a deadline for a unary call's request message (``request_timeout``): a call whose message never
  completes (headers sent, data withheld) is ended with DEADLINE_EXCEEDED and frees its slot.

- answers held until written: a unary call is served as a streaming call that reads one message
  and writes one (the same bytes on the wire, so clients cannot tell), because grpc resumes a
  streaming handler only once its message has been written to the connection. What the handler
  asked to keep until then (``release_after_write``: its admission, with the answer's bytes) is
  released there, so ``--max-inflight-bytes`` counts answers a client has not taken;
- a deadline for each response message (``write_timeout`` plus one second per MiB): a client that
  has not taken it by then has its connection closed (``peer_sockets.py``), which ends its calls
  and frees their answers. grpc itself offers no way to end a call whose message it is writing.

Streaming calls count against the peer cap for as long as they are open (a stream may rightly stay
idle between requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
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


def peer_host(peer: str) -> str:
    """The address part of grpc's peer string ("ipv4:1.2.3.4:5678", "ipv6:[::1]:5678"); "" for a
    unix socket, whose only clients are this server's own intake processes (not counted)."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0]
    return ""


async def _first_message(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, timeout: float) -> Any:
    """The call's one request message, or the call aborted when it has not arrived in ``timeout``.

    A timer that cancels this task, not ``asyncio.wait_for``: no extra task per call."""
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(timeout, expire)
    try:
        message = await requests.__anext__()
        # the reader would keep the message's bytes until the call is collected: close it now
        await _close_reader(requests)
        return message
    except asyncio.CancelledError:
        if not expired:
            raise
        if hasattr(task, "uncancel"):
            task.uncancel()
    except StopAsyncIteration:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")
    finally:
        timer.cancel()
    await context.abort(
        grpc.StatusCode.DEADLINE_EXCEEDED,
        f"the request message did not arrive within {timeout:g} s (--grpc-request-timeout-secs)",
    )


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


async def _close_reader(requests: AsyncIterator[Any]) -> None:
    """End grpc's request reader (its generator keeps the last message it read)."""
    reader = requests.__aiter__()
    aclose = getattr(reader, "aclose", None)
    if aclose is not None:
        await aclose()


class CallGuard(grpc.aio.ServerInterceptor):
    """Counts unfinished calls per peer address, times request and response messages, and holds
    what a unary call asks to keep until its answer is written (see the module docstring).

    Everything runs on the server's event loop, so a plain dict is the count."""

    def __init__(
        self, max_calls_per_peer: int, request_timeout: float, write_timeout: float, ports: Collection[int] = ()
    ) -> None:
        self.max_calls_per_peer = max_calls_per_peer
        self.request_timeout = request_timeout
        self.write_timeout = write_timeout
        #: the listening ports whose connections a stalled write may close (set once bound)
        self.ports: Collection[int] = ports
        self.calls: dict[str, int] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        if not handler.request_streaming and not handler.response_streaming:
            return self._guard_unary(handler)
        if handler.request_streaming and handler.response_streaming:
            return self._guard_bidi(handler)
        return handler  # the inference service has no other kinds of RPC

    def _guard_unary(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        behaviour: Any = handler.unary_unary
        timeout = self.request_timeout

        async def unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            peer = await self._enter(context)
            pending: list[Callable[[], object]] = []
            reset = _after_write.set(pending)
            try:
                # the message goes to the handler without a name here to keep it alive after use
                response = await behaviour(await _first_message(requests, context, timeout), context)
                timer = self._watch(context, response)
                try:
                    yield response  # resumes once grpc has written it
                finally:
                    if timer is not None:
                        timer.cancel()
            finally:
                for release in pending:
                    release()
                with contextlib.suppress(ValueError):  # closed from another task (a collected call)
                    _after_write.reset(reset)
                self._leave(peer)

        return grpc.stream_stream_rpc_method_handler(
            unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

    def _guard_bidi(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        streaming: Any = handler.stream_stream

        async def bidi(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            peer = await self._enter(context)
            try:
                async for response in streaming(requests, context):
                    timer = self._watch(context, response)
                    try:
                        yield response  # resumes once grpc has written it
                    finally:
                        if timer is not None:
                            timer.cancel()
            finally:
                self._leave(peer)

        return grpc.stream_stream_rpc_method_handler(
            bidi, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

    def _watch(self, context: grpc.aio.ServicerContext, response: Any) -> asyncio.TimerHandle | None:
        """A deadline for writing ``response``: past it the client's connection is closed (cancel
        the handle once written). Calls from this server's own intake processes (a unix socket) are
        never cut."""
        peer = context.peer()
        if not peer_host(peer) or not self.ports:
            return None
        allowed = self.write_timeout + response.ByteSize() / WRITE_BYTES_PER_SEC
        return asyncio.get_running_loop().call_later(allowed, self._cut, peer, allowed)

    def _cut(self, peer: str, allowed: float) -> None:
        """Close the connection of a client that did not take a response in time (off the loop)."""
        closing = asyncio.get_running_loop().run_in_executor(None, close_peer_connections, peer, tuple(self.ports))
        closing.add_done_callback(functools.partial(_report_cut, peer, allowed))

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
