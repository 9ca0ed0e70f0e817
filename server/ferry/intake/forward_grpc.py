"""The intake's gRPC servicer: inference served here, every other RPC relayed to the core.

Why: ``ModelInfer`` and ``ModelStreamInfer`` run in the intake process (through its data plane), so
a client's messages are received, counted and parsed only here (relaying a stream whole cost the
intake the message's bytes and grpc's copies of them, and the core as much again); a stream's
request to a decoupled model is relayed to the core as a stream of its own, whose responses come
back into the client's stream as they come. Health, metadata, repository control, statistics,
shared-memory registration, trace and log settings belong to the core process, which serves its
normal gRPC server on a unix socket. Every method not served here is relayed by one of two handlers
(unary, bidi-streaming: ``relay_handler``), so an RPC added to the proto is relayed without a code
change. A relayed stream's answers count
against the in-flight bytes until they are written to the caller. The caller's metadata and
deadline go to the core; the core's status code, details and metadata come back unchanged; a core
that cannot be reached is UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc

from ferry_client.protocol import grpc_service_pb2 as pb

from ..api.admission import Ticket
from ..api.grpc import InferenceRpcs, answering, put_answer
from ..api.grpc_wire import ReceivedInferRequest
from ..api.inference_plane import InferencePlane
from ..errors import FerryError
from ..heap import HeapTrimmer

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
#: Served by the intake process itself; every other method of SERVICE is relayed.
LOCAL_METHODS = frozenset({"ModelInfer", "ModelStreamInfer"})
STREAM_PATH = f"/{SERVICE.full_name}/ModelStreamInfer"
#: Metadata that gRPC sets for each call itself (or refuses from an application): never relayed.
CALL_METADATA = frozenset({"user-agent", "te", "content-type", "host"})
UNREACHABLE = "the model process is not reachable; try again later"

Metadata = tuple[tuple[str, str | bytes], ...]


def relayed_metadata(context: grpc.aio.ServicerContext) -> Metadata:
    """The caller's invocation metadata (authorization, custom keys, ``-bin`` values) minus gRPC's own."""
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata() or ()
        if key not in CALL_METADATA and not key.startswith((":", "grpc-"))
    )


class ForwardingServicer(InferenceRpcs):
    """The inference RPCs answered here; every other RPC relayed to the core behind ``core_channel``."""

    local_methods: frozenset[str] = LOCAL_METHODS

    def __init__(self, plane: InferencePlane, max_response_bytes: int, core_channel: grpc.aio.Channel) -> None:
        super().__init__(plane, max_response_bytes)
        self.core_channel = core_channel

    def relay_handler(self, method: str) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        """The handler calling ``method`` on the core, for every method not served here.

        Messages pass through as bytes both ways: the core parses (and refuses) them itself, so a
        relayed message is neither parsed nor re-encoded here (a streamed 47 MiB message cost two
        copies more in the intake that way). The service has unary and bidi-streaming methods."""
        if method in self.local_methods:
            return None
        path = f"/{SERVICE.full_name}/{method}"
        if SERVICE.methods_by_name[method].client_streaming:
            return grpc.stream_stream_rpc_method_handler(functools.partial(self.relay_stream, path))
        return grpc.unary_unary_rpc_method_handler(functools.partial(self.relay_unary, path))

    async def relay_unary(self, path: str, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """A unary call relayed to the core's ``path``, answered as the core answered it."""
        relayed: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.core_channel.unary_unary(path)
        call = relayed(request, metadata=relayed_metadata(context), timeout=context.time_remaining())
        try:
            response: bytes = await call
            await _pass_initial_metadata(call, context)
            await _pass_trailing_metadata(call, context)
            return response
        except grpc.aio.AioRpcError as exc:
            await self._abort_as(exc, context)
            raise AssertionError("unreachable: abort raises") from exc

    async def relay_stream(
        self, path: str, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """A bidi-streaming call relayed to the core's ``path``; each answer is counted against the
        in-flight bytes until grpc wrote it to the caller."""
        relayed: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = self.core_channel.stream_stream(path)
        requests = _trimmed(requests, self.plane.admission.heap)
        call = relayed(requests, metadata=relayed_metadata(context), timeout=context.time_remaining())
        try:
            await _pass_initial_metadata(call, context)
            async for response in call:
                release = self.plane.admission.hold(len(response))  # until grpc wrote it
                try:
                    yield response
                finally:
                    release()
            await _pass_trailing_metadata(call, context)
        except grpc.aio.AioRpcError as exc:
            await self._abort_as(exc, context)
        finally:
            call.cancel()  # the caller went away (or the call ended: then this does nothing)

    async def _stream_decoupled(
        self,
        request: ReceivedInferRequest,
        out: asyncio.Queue,
        client: str,
        counted: Ticket | None = None,
        context: grpc.aio.ServicerContext | None = None,
    ) -> None:
        """A stream's request to a decoupled model, relayed to the core as a stream of its own (the
        model runs there): each response goes into the client's stream as it comes, counted until
        written. Its message stays counted here (``counted``) until grpc has taken it for the core."""
        assert context is not None  # ModelStreamInfer passes its call's
        answers = answering(request.message)
        call: Any = self.core_channel.stream_stream(STREAM_PATH)(
            metadata=relayed_metadata(context), timeout=context.time_remaining()
        )
        try:
            with counted or self.plane.admission.admit(request.peak):
                message = request.serialized()  # the bytes received, when kept
                del request  # (the stream's reader drops its own reference once this task runs)
                await call.write(message)
                del message
            await call.done_writing()
            async for raw in call:
                release = self.plane.admission.hold(len(raw))  # until grpc wrote it
                try:
                    response = pb.ModelStreamInferResponse.FromString(raw)
                except BaseException:
                    release()
                    raise
                await put_answer(out, response, release)
        except FerryError as exc:
            await put_answer(out, pb.ModelStreamInferResponse(error_message=exc.message, infer_response=answers))
        except grpc.aio.AioRpcError as exc:
            details = UNREACHABLE if self._core_unreachable() else exc.details() or exc.code().name
            await put_answer(out, pb.ModelStreamInferResponse(error_message=details, infer_response=answers))
        finally:
            call.cancel()  # the client's stream went away (or the call ended: then this does nothing)

    async def _abort_as(self, exc: grpc.aio.AioRpcError, context: grpc.aio.ServicerContext) -> None:
        """End the caller's RPC as the core ended it; a connection failure says the core is unreachable.

        The core's own UNAVAILABLE (a model not ready, ...) arrives on a READY channel; a failed
        connection leaves the channel in another state."""
        if exc.code() == grpc.StatusCode.UNAVAILABLE and self._core_unreachable():
            log.warning("cannot reach the core over gRPC: %s", exc.details())
            await context.abort(grpc.StatusCode.UNAVAILABLE, UNREACHABLE)
        await context.abort(exc.code(), exc.details() or "", _metadata_tuple(exc.trailing_metadata()))

    def _core_unreachable(self) -> bool:
        return self.core_channel.get_state(try_to_connect=False) != grpc.ChannelConnectivity.READY


async def _trimmed(requests: AsyncIterator[bytes], heap: HeapTrimmer) -> AsyncIterator[bytes]:
    """The relayed stream's messages; each one's size goes to the heap trimmer once it has been
    passed on: the pieces grpc received it in are free by then, and left in the heap a stream of
    47 MiB messages kept the intake +400 MB above what it held."""
    async for raw in requests:
        size = len(raw)
        held = [raw]
        del raw  # not kept by this frame while it is passed on
        yield held.pop()
        heap.released(size)


async def _pass_initial_metadata(call: Any, context: grpc.aio.ServicerContext) -> None:
    """The core's initial metadata, for the caller (before any response message)."""
    initial = await call.initial_metadata()
    if initial:
        await context.send_initial_metadata(_metadata_tuple(initial))


async def _pass_trailing_metadata(call: Any, context: grpc.aio.ServicerContext) -> None:
    """The core's trailing metadata of a call that succeeded, for the caller."""
    trailing = await call.trailing_metadata()
    if trailing:
        context.set_trailing_metadata(_metadata_tuple(trailing))


def _metadata_tuple(metadata: Iterable[tuple[str, str | bytes]] | None) -> Metadata:
    return tuple((key, value) for key, value in metadata or ())
