"""Per-peer call limits and a deadline for the request message of every gRPC call.

``--grpc-max-concurrent-rpcs`` bounds unfinished calls server-wide, so alone it lets one client
that opens thousands of calls and never finishes them hold every slot: everyone else is refused.
This interceptor, which sees each call as it arrives (before its request message), adds

- a cap on the unfinished calls of one peer address (``max_calls_per_peer``): past it that peer's
  new calls get RESOURCE_EXHAUSTED at once, other peers keep their share of the server-wide cap;
- a deadline for a unary call's request message (``request_timeout``): a call whose message never
  completes (headers sent, data withheld) is ended with DEADLINE_EXCEEDED and frees its slot.

To see a unary call before its message arrives, it is served as a stream-unary call that reads one
message: the same bytes on the wire, so clients cannot tell. Streaming calls count against the peer
cap for as long as they are open (a stream may rightly stay idle between requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc


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
        return await requests.__anext__()
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


class CallGuard(grpc.aio.ServerInterceptor):
    """Counts unfinished calls per peer address and times request messages (see the module docstring).

    Everything runs on the server's event loop, so a plain dict is the count."""

    def __init__(self, max_calls_per_peer: int, request_timeout: float) -> None:
        self.max_calls_per_peer = max_calls_per_peer
        self.request_timeout = request_timeout
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

        async def unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            peer = await self._enter(context)
            try:
                request = await _first_message(requests, context, timeout)
                return await behaviour(request, context)
            finally:
                self._leave(peer)

        return grpc.stream_unary_rpc_method_handler(
            unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

    def _guard_bidi(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        streaming: Any = handler.stream_stream

        async def bidi(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            peer = await self._enter(context)
            try:
                async for response in streaming(requests, context):
                    yield response
            finally:
                self._leave(peer)

        return grpc.stream_stream_rpc_method_handler(
            bidi, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

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
