"""Malformed request messages become INVALID_ARGUMENT instead of grpc.aio's UNKNOWN.

grpc.aio deserialises requests before the servicer runs; bytes that are not a valid message make it
answer UNKNOWN ("Unexpected DecodeError") and log a traceback per call, which lets any client fill
the log. ``decoding_handler`` wraps each method's handler (once, at registration) so that it takes
deserialisation over: the caller gets a precise status and the server logs nothing.

Taking it over also lets a method count its message from the bytes, before it is parsed
(``count``, at what its ``MessageReader`` says it holds once parsed): the parsed copy then never
exists uncounted, and a message the server has no room for is refused without being parsed at all.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, NamedTuple, cast

import grpc
from google.protobuf.message import DecodeError

from ..errors import ErrorKind, FerryError
from ..workers import run_in
from .limits import OFF_LOOP_BYTES

Context = grpc.aio.ServicerContext[Any, Any]


async def _decode(
    raw: bytes, deserialize: Callable[[bytes], Any], method: str, message_type: str, context: Context, pool: Executor
) -> Any:
    try:
        if len(raw) < OFF_LOOP_BYTES:
            return deserialize(raw)
        return await run_in(pool, deserialize, raw)  # a large message must not stall other calls
    except DecodeError:
        await context.abort(
            ErrorKind.INVALID_ARGUMENT.grpc_code,
            f"{method.rsplit('/', 1)[-1]}: the request is not a valid {message_type} message",
        )


#: What grpc.aio keeps in an RpcMethodHandler: coroutine functions taking the aio context (the stubs
#: describe the synchronous server's handlers, whose behaviours return values and iterators).
UnaryBehaviour = Callable[[Any, Context], Awaitable[Any]]
StreamBehaviour = Callable[[AsyncIterator[Any], Context], AsyncIterator[Any]]


#: Counts a request message from what it will hold once parsed (``MessageReader.peak``) before it is
#: parsed (raises a FerryError to refuse it); returns what gives the count back if the method's
#: handler did not take it over.
MessageCount = Callable[[int], Callable[[], None]]


class MessageReader(NamedTuple):
    """How a method's request messages are parsed (``parse``) and what one holds once parsed, from
    its bytes (``peak``: never raises; ``parse`` judges malformed bytes)."""

    parse: Callable[[bytes], Any]
    peak: Callable[[bytes], int]


#: Why the streamed message being served was refused by its ``count`` (None: it was not): it goes
#: on, unparsed, as an empty message whose serving answers that refusal (``take_refusal``), so the
#: stream answers that request with an error and goes on, as for any refused request.
_refusal: contextvars.ContextVar[FerryError | None] = contextvars.ContextVar("ferry_grpc_refusal", default=None)


def take_refusal() -> FerryError | None:
    """Why the streamed message being served was refused before it was parsed (once), or None."""
    refusal = _refusal.get()
    if refusal is not None:
        _refusal.set(None)
    return refusal


def decoding_handler(
    handler: grpc.RpcMethodHandler[Any, Any],
    method: str,
    pool: Executor,
    count: MessageCount | None = None,
    reader: MessageReader | None = None,
) -> grpc.RpcMethodHandler[Any, Any]:
    """The same handler, receiving raw bytes and decoding them itself (large ones on ``pool``, the
    codec pool; unary and bidi-streaming RPCs) with ``reader`` (else the handler's deserialiser),
    calling ``count`` first with what each message will hold once parsed."""
    if handler.request_deserializer is None:
        return handler  # nothing to decode
    message_type = getattr(getattr(handler.request_deserializer, "__self__", None), "__name__", "request")
    deserialize, peak = reader or MessageReader(handler.request_deserializer, _twice)
    serializer = handler.response_serializer
    if not handler.request_streaming and not handler.response_streaming and handler.unary_unary is not None:
        behaviour = cast(UnaryBehaviour, handler.unary_unary)

        async def unary(raw: bytes, context: Context) -> Any:
            uncount = None
            if count is not None:
                refusal = None
                try:
                    uncount = count(peak(raw))
                except FerryError as exc:
                    refusal = exc
                if refusal is not None:  # aborted outside the except clause (see api/grpc.py's _rpc)
                    del raw
                    await context.abort(refusal.grpc_code, refusal.message)
            try:
                decoding = _decode(raw, deserialize, method, message_type, context, pool)
                del raw  # the parsed message is all the call needs from here on
                # the message goes to the method without a name here: grpc keeps an aborted call's
                # AbortError, whose traceback holds this frame, after the call
                return await behaviour(await decoding, context)
            finally:
                if uncount is not None:
                    uncount()

        return grpc.unary_unary_rpc_method_handler(unary, response_serializer=serializer)
    if handler.request_streaming and handler.response_streaming and handler.stream_stream is not None:
        streaming = cast(StreamBehaviour, handler.stream_stream)

        async def bidi(raw_requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[Any]:
            async def requests() -> AsyncIterator[Any]:
                async for raw in raw_requests:
                    uncount = None
                    if count is not None:
                        try:
                            uncount = count(peak(raw))
                        except FerryError as exc:
                            del raw
                            _refusal.set(
                                exc
                            )  # a context variable: grpc calls the servicer with (message, context) only
                            yield deserialize(b"")
                            _refusal.set(None)
                            continue
                    decoding = _decode(raw, deserialize, method, message_type, context, pool)
                    del raw  # not kept by this frame while the stream serves the message
                    try:
                        yield await decoding
                    finally:  # the stream has served it (or ended): the count is its handler's
                        if uncount is not None:
                            uncount()

            async for response in streaming(requests(), context):
                yield response

        return grpc.stream_stream_rpc_method_handler(bidi, response_serializer=serializer)
    return handler  # the inference service has no other kinds of RPC


def _twice(raw: bytes) -> int:
    """A message parsed whole: its bytes and protobuf's parse."""
    return 2 * len(raw)
