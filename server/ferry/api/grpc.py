"""The gRPC front door: ``inference.GRPCInferenceService`` on grpc.aio.

Each RPC translates its message to the data plane and back; a FerryError aborts the call with the
status code its kind carries, so gRPC and REST report the same failures the same way.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf import json_format

from ferry_client.codec.parameters import set_parameter
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..errors import DecoupledModel, FerryError, InvalidArgument, Unimplemented
from ..types import InferenceRequest
from ..workers import run_in
from .admission import Ticket
from .drain_cutoff import DrainCutoff
from .grpc_calls import CallGuard, WrappedRegistration, peer_host, release_after_write
from .grpc_codec import decode_infer_request, encode_infer_response
from .grpc_decode import MessageReader, decoding_handler, take_refusal
from .grpc_limits import GrpcLimits
from .grpc_turns import current_stream
from .grpc_wire import ReceivedInferRequest, parse_infer_request, peak_bytes
from .inference_plane import InferencePlane
from .limits import OFF_LOOP_BYTES
from .response_size import GRPC_BINARY_COPIES, estimated_size, reserve_outputs, reserve_response
from .shared_memory_grpc import caller, register, status_response

if TYPE_CHECKING:  # the model process's plane; an intake imports this module for its relay only
    from .dataplane import DataPlane

log = logging.getLogger(__name__)

T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]


def _rpc(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Turn data-plane errors into gRPC statuses; anything unexpected becomes INTERNAL."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Context) -> T:
        try:
            return await method(self, request, context)
        except FerryError as exc:
            code, details = exc.grpc_code, exc.message
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            log.exception("unexpected error in %s", method.__name__)
            code, details = grpc.StatusCode.INTERNAL, f"internal error: {exc}"
        # aborted outside the except clause: grpc keeps the call's AbortError after the call, and
        # raised in there it would carry the error (as its context) and the error's traceback, whose
        # frames hold the request message: a refused 30 MiB request stayed in memory, uncounted; nor
        # may this frame, which the AbortError's traceback holds, keep the message
        del request
        await context.abort(code, details)
        raise AssertionError("unreachable")

    return wrapper


#: The endpoints a request names to the plane (in Triton's error for a decoupled model; a plane that
#: runs requests elsewhere tells a streamed one apart by it).
UNARY_DOOR = "ModelInfer RPC"
STREAM_DOOR = "ModelStreamInfer RPC"

#: The admission of the request message being served (ModelInfer's, or the one a stream read last),
#: taken from its bytes before it was parsed (``InferenceRpcs.count_message``) and not yet taken
#: over by ``_infer`` or a decoupled request.
_message_ticket: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar(
    "ferry_grpc_message_ticket", default=None
)


class InferenceRpcs(pb_grpc.GRPCInferenceServiceServicer):
    """``ModelInfer`` and ``ModelStreamInfer`` over any inference plane (an intake process's too);
    every other RPC answers UNIMPLEMENTED unless a subclass implements or relays it."""

    def __init__(self, plane: InferencePlane, max_response_bytes: int = 256 * 1024 * 1024) -> None:
        self.plane = plane
        self.max_response_bytes = max_response_bytes

    def relay_handler(self, method: str) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        """The handler that relays ``method`` (its name) elsewhere with its messages as bytes,
        unparsed, instead of this servicer's own; None: served here (all of them; an intake relays most)."""
        return None

    def count_message(self, size: int) -> Callable[[], None]:
        """Admit a request message (ModelInfer's, or a streamed one) from its bytes, before
        grpc_decode parses them (its ``count``), at ``size``, what it holds once parsed
        (``grpc_wire.peak_bytes``: the bytes, whose views are its raw tensors, and protobuf's parse
        of the rest).
        It runs as soon as the peer's turn for the message ends (``grpc_turns.py``), so what a
        client's messages hold uncounted is only what grpc is still receiving. Returns what closes
        the admission unless ``_infer`` (or a decoupled request) took it."""
        admission = self.plane.admission
        ticket = None
        try:
            ticket = admission.admit()
            ticket.reserve(size)  # refused as a whole when it alone cannot fit
        except FerryError:
            if ticket is not None:
                ticket.close()
            admission.heap.released(size)  # grpc's copy and the bytes are freed, uncounted
            raise
        _message_ticket.set(ticket)  # a context variable: grpc calls the servicer with (message, context) only

        def close_unless_taken() -> None:
            if _message_ticket.get() is ticket:
                _message_ticket.set(None)
                ticket.close()

        return close_unless_taken

    @_rpc
    async def ModelInfer(self, request: ReceivedInferRequest, context: Context) -> pb.ModelInferResponse:
        message, release = await self._infer(request, caller(self.plane.identify, context))
        release_after_write(release)  # the admission, answer included, stays until grpc wrote it
        return message

    async def _decode(self, request: ReceivedInferRequest, ticket: Any, client: str) -> InferenceRequest:
        limits = self.plane.limits
        if request.size < OFF_LOOP_BYTES:
            infer_request = decode_infer_request(request.message, limits, request.raw)
        else:
            infer_request = await run_in(
                self.plane.workers.codec, decode_infer_request, request.message, limits, request.raw
            )
        infer_request.client = client
        infer_request.ticket = ticket
        if not request.raw:  # typed contents were copied into new arrays
            ticket.reserve(sum(array.nbytes for array in infer_request.inputs.values()))
        return infer_request

    async def _infer(
        self,
        request: ReceivedInferRequest,
        client: str,
        into: pb.ModelInferResponse | None = None,
        door: str = UNARY_DOOR,
    ) -> tuple[pb.ModelInferResponse, Release]:
        """Admit one request at its real cost: the message, typed contents decoded, the response.

        Returns the answer with the release of its admission, which the caller calls once the
        answer has been written: until then the answer is memory this request holds."""
        refusal = take_refusal()
        if refusal is not None:  # a streamed message refused from its bytes (never parsed)
            raise refusal
        ticket = _message_ticket.get()
        if ticket is None:  # not counted from its bytes (a caller without grpc_decode): admitted now
            ticket = self.plane.admission.admit(request.peak)
        else:  # counted from its bytes (count_message): this call holds it from here on
            _message_ticket.set(None)
        try:
            infer_request = await self._decode(request, ticket, client)
            outputs = reserve_outputs(infer_request.inputs, ticket)
            response = await self.plane.infer(infer_request, door=door)
            reserve_response(
                response, self.max_response_bytes, ticket, binary_only=True, copies=GRPC_BINARY_COPIES, reserved=outputs
            )
            if estimated_size(response, binary_only=True) < OFF_LOOP_BYTES:
                return encode_infer_response(response, into), ticket.close
            return await run_in(self.plane.workers.codec, encode_infer_response, response, into), ticket.close
        except BaseException:
            ticket.close()
            raise

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[ReceivedInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Answer streamed requests; an error answers that request, not the stream.

        Requests to models that are not decoupled are answered one by one, in order, each with
        Triton's ``triton_final_response`` flag (true; with ``triton_enable_empty_final_response``
        the data response is flagged false and an empty final response follows). A decoupled
        model's request runs alongside the others: each response it sends goes out as it comes,
        flagged final only when the model sent it with the final flag; its empty final response
        goes out only if the request set ``triton_enable_empty_final_response`` (as Triton). The
        buffer toward a client that does not read is bounded: the model then waits to send. Each
        answer's bytes stay counted against the in-flight bytes until grpc has written it."""
        client = caller(self.plane.identify, context)
        out: asyncio.Queue[Outgoing | None] = asyncio.Queue(STREAM_BUFFER)
        running: set[asyncio.Task] = set()
        peer = peer_host(context.peer())
        limits = self.plane.stream_limits

        async def start_decoupled(request: ReceivedInferRequest, ticket: Ticket | None) -> None:
            """Run the request alongside the stream's others, unless the stream or its client has
            too many open (``stream_limits.py``): then it is answered with the refusal at once."""
            try:
                leave = limits.enter(peer, len(running))
            except FerryError as exc:
                if ticket is not None:
                    ticket.close()
                await put_answer(
                    out,
                    pb.ModelStreamInferResponse(error_message=exc.message, infer_response=answering(request.message)),
                )
                return
            task = asyncio.create_task(self._stream_decoupled(request, out, client, ticket, context))
            running.add(task)
            task.add_done_callback(running.discard)
            task.add_done_callback(lambda _: leave())

        async def read() -> None:
            async for request in request_iterator:
                if self.plane.is_decoupled(request.message.model_name, request.message.model_version):
                    ticket = _message_ticket.get()
                    _message_ticket.set(None)  # the request's own task holds it from here on
                    await start_decoupled(request, ticket)
                else:
                    try:
                        await self._stream_one(request, out, client)
                    except DecoupledModel:  # found so where it runs (an intake's plane): streamed from there
                        await start_decoupled(request, None)
                    if not running and current_stream.get() is not None:  # the next message is asked
                        await out.join()  # for in a turn of its address: once this answer is written
                del request  # an idle stream keeps no message
            while running:
                await asyncio.gather(*list(running), return_exceptions=True)
            await out.put(None)

        reader = asyncio.create_task(read())
        getting: asyncio.Future[Outgoing | None] | None = None
        try:
            while True:
                getting = asyncio.ensure_future(out.get())
                await asyncio.wait((getting, reader), return_when=asyncio.FIRST_COMPLETED)
                if not getting.done():  # the reader ended (or failed) with nothing left to send
                    getting.cancel()
                    if out.empty():
                        reader.result()  # raises what broke the request stream
                        return
                    continue
                outgoing = getting.result()
                if outgoing is None:
                    return
                message, release = outgoing
                try:
                    yield message  # resumes once grpc has written it
                finally:
                    release()
                    out.task_done()
        finally:
            if getting is not None:  # a stream ended while waiting: else the task stays pending
                getting.cancel()  # until collected, then asyncio logs an ERROR for it
            for task in (reader, *running):
                task.cancel()
            await asyncio.gather(reader, *running, return_exceptions=True)
            while not out.empty():  # answers never sent: no longer held
                left = out.get_nowait()
                if left is not None:
                    left[1]()

    async def _stream_one(self, request: ReceivedInferRequest, out: asyncio.Queue, client: str) -> None:
        try:
            empty_final = _wants_empty_final(request.message)
            streamed = pb.ModelStreamInferResponse()
            message, release = await self._infer(request, client, streamed.infer_response, STREAM_DOOR)
            message.parameters[FINAL_FLAG].bool_param = not empty_final
            await put_answer(out, streamed, release)
            if empty_final:
                await put_answer(out, pb.ModelStreamInferResponse(infer_response=_empty_final(message)))
        except DecoupledModel:
            raise  # the stream serves it as a decoupled request
        except FerryError as exc:
            await put_answer(out, pb.ModelStreamInferResponse(error_message=exc.message))
        except Exception as exc:
            log.exception("unexpected error in ModelStreamInfer")
            await put_answer(out, pb.ModelStreamInferResponse(error_message=f"internal error: {exc}"))

    async def _stream_decoupled(
        self,
        request: ReceivedInferRequest,
        out: asyncio.Queue,
        client: str,
        counted: Ticket | None = None,
        context: Context | None = None,
    ) -> None:
        """Every response of one decoupled request into the stream (holding its admission slot:
        ``counted``, taken from the message's bytes, or one admitted here). ``context``: the
        client's call, for a servicer that relays the request on (an intake's)."""
        empty_final = _wants_empty_final(request.message)
        answers = answering(request.message)
        try:
            with counted or self.plane.admission.admit(request.peak) as ticket:
                infer_request = await self._decode(request, ticket, client)
                async for item, final in self.plane.infer_stream(infer_request):
                    if isinstance(item, FerryError):
                        failed = pb.ModelInferResponse()
                        failed.CopyFrom(answers)
                        failed.parameters[FINAL_FLAG].bool_param = final
                        await put_answer(
                            out, pb.ModelStreamInferResponse(error_message=item.message, infer_response=failed)
                        )
                        continue
                    if final and not item.outputs and not empty_final:
                        continue  # the bare end of the request: sent only to clients that asked for it
                    streamed = pb.ModelStreamInferResponse()
                    # the outputs' bytes: ByteSize() would serialise the whole message on the loop
                    # (upb), for every response of every stream
                    size = estimated_size(item, binary_only=True)
                    if size < OFF_LOOP_BYTES:
                        encode_infer_response(item, streamed.infer_response)
                    else:
                        await run_in(self.plane.workers.codec, encode_infer_response, item, streamed.infer_response)
                    streamed.infer_response.parameters[FINAL_FLAG].bool_param = final
                    # counted from here until written, apart from the request's admission
                    await put_answer(out, streamed, self.plane.admission.hold(size))
        except FerryError as exc:
            await put_answer(out, pb.ModelStreamInferResponse(error_message=exc.message, infer_response=answers))
        except Exception as exc:
            log.exception("unexpected error in ModelStreamInfer")
            await put_answer(out, pb.ModelStreamInferResponse(error_message=f"internal error: {exc}"))


class InferenceServicer(InferenceRpcs):
    """Implements every RPC the server supports, over the model process's data plane."""

    plane: DataPlane

    def __init__(self, plane: DataPlane, max_response_bytes: int = 256 * 1024 * 1024) -> None:
        super().__init__(plane, max_response_bytes)

    @_rpc
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.plane.live())

    @_rpc
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.plane.ready())

    @_rpc
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self.plane.model_ready(request.name, request.version))

    @_rpc
    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Context) -> pb.ServerMetadataResponse:
        return json_format.ParseDict(self.plane.server_metadata(), pb.ServerMetadataResponse())

    @_rpc
    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Context) -> pb.ModelMetadataResponse:
        metadata = self.plane.model_metadata(request.name, request.version)
        parameters = metadata.pop("parameters", {})
        response = json_format.ParseDict(metadata, pb.ModelMetadataResponse())
        for key, value in parameters.items():
            set_parameter(response.parameters[key], key, value)
        return response

    @_rpc
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        response = pb.ModelConfigResponse()
        response.config.CopyFrom(self.plane.model_config(request.name, request.version))
        return response

    @_rpc
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Context) -> pb.ModelStatisticsResponse:
        stats = self.plane.statistics(request.name, request.version)
        return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    @_rpc
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Context) -> pb.RepositoryIndexResponse:
        rows = self.plane.repository_index(ready_only=request.ready)
        return json_format.ParseDict({"models": rows}, pb.RepositoryIndexResponse())

    @_rpc
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        config = None
        for key, value in request.parameters.items():
            if key == "config":
                if value.WhichOneof("parameter_choice") != "string_param":
                    raise InvalidArgument("parameter 'config' must be a string holding the model config as JSON")
                config = value.string_param
            elif key.startswith("file:"):
                raise InvalidArgument(
                    "loading model files through the API is not supported; place them in the repository"
                )
        await self.plane.load_model(request.model_name, config)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        dependents = False
        if "unload_dependents" in request.parameters:
            value = request.parameters["unload_dependents"]
            if value.WhichOneof("parameter_choice") != "bool_param":
                raise InvalidArgument("parameter 'unload_dependents' must be a bool")
            dependents = value.bool_param
        await self.plane.unload_model(request.model_name, dependents)
        return pb.RepositoryModelUnloadResponse()

    @_rpc
    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Context) -> pb.TraceSettingResponse:
        from .trace_ext import grpc_trace_setting  # here: an intake, which relays this call, has no tracing

        return grpc_trace_setting(self.plane.tracing, self.plane.model, request)

    @_rpc
    async def LogSettings(self, request: pb.LogSettingsRequest, context: Context) -> pb.LogSettingsResponse:
        if self.plane.logging is None:
            raise Unimplemented("the logging extension is not enabled on this server")
        from .logging_ext import grpc_log_settings  # here: an intake, which relays this call, needs no FastAPI

        return grpc_log_settings(self.plane.logging, request)

    # --- shared memory extensions (api/shared_memory.py) ---------------------------------------

    @_rpc
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        return status_response(self.plane.shared_memory, caller(self.plane.identify, context), request.name)

    @_rpc
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        register(self.plane.shared_memory, caller(self.plane.identify, context), request)
        return pb.SystemSharedMemoryRegisterResponse()

    @_rpc
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self.plane.shared_memory.unregister(caller(self.plane.identify, context), request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_rpc
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        owner = caller(self.plane.identify, context)
        regions = self.plane.shared_memory.status(owner, request.name, cuda=True)
        return pb.CudaSharedMemoryStatusResponse(
            regions={
                r["name"]: pb.CudaSharedMemoryStatusResponse.RegionStatus(
                    name=r["name"], device_id=r["device_id"], byte_size=r["byte_size"]
                )
                for r in regions
            }
        )

    @_rpc
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        owner = caller(self.plane.identify, context)
        registry = self.plane.shared_memory
        registry.check_enabled()
        register = registry.register_cuda
        args = (owner, request.name, request.raw_handle, request.device_id, request.byte_size)
        await asyncio.get_running_loop().run_in_executor(None, register, *args)  # opens a device handle
        return pb.CudaSharedMemoryRegisterResponse()

    @_rpc
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self.plane.shared_memory.unregister(caller(self.plane.identify, context), request.name, cuda=True)
        return pb.CudaSharedMemoryUnregisterResponse()


Release = Callable[[], None]
#: A stream's answer waiting to be written, and what releases its bytes once it has been.
Outgoing = tuple[pb.ModelStreamInferResponse, Release]


def _nothing() -> None:
    """The release of an answer that holds nothing worth counting (an error, an empty final)."""


async def put_answer(
    out: asyncio.Queue[Outgoing | None], message: pb.ModelStreamInferResponse, release: Release = _nothing
) -> None:
    """Queue ``message``; if the stream is ended while waiting for room, release it at once."""
    try:
        await out.put((message, release))
    except BaseException:
        release()
        raise


FINAL_FLAG = "triton_final_response"
#: Responses a gRPC stream holds for a client that is slow to read (then decoupled models wait).
STREAM_BUFFER = 16
EMPTY_FINAL_REQUEST = "triton_enable_empty_final_response"


def answering(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    """An empty response naming the request it answers (model, version, id)."""
    return pb.ModelInferResponse(model_name=request.model_name, model_version=request.model_version, id=request.id)


def _wants_empty_final(request: pb.ModelInferRequest) -> bool:
    parameter = request.parameters.get(EMPTY_FINAL_REQUEST)
    return parameter is not None and parameter.bool_param


def _empty_final(response: pb.ModelInferResponse) -> pb.ModelInferResponse:
    """The final response of a stream request: no outputs, only who it answers and the flag."""
    final = pb.ModelInferResponse(model_name=response.model_name, model_version=response.model_version, id=response.id)
    final.parameters[FINAL_FLAG].bool_param = True
    return final


def create_grpc_server(
    plane: DataPlane,
    address: str,
    max_message_bytes: int,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
    limits: GrpcLimits | None = None,
    max_response_bytes: int = 256 * 1024 * 1024,
    servicer: InferenceRpcs | None = None,
    reuse_port: bool = False,
    cutoff: DrainCutoff | None = None,
) -> grpc.aio.Server:
    """A grpc.aio server bound to ``address`` with message and connection limits (TLS when given credentials).

    ``servicer`` replaces the default ``InferenceServicer(plane, max_response_bytes)`` (an intake
    process passes its forwarding one). ``reuse_port``: several intake processes listen on the port
    (otherwise a port in use is an error). ``cutoff``: where unary calls register, to be answered
    UNAVAILABLE when the shutdown's drain ends before them."""
    limits = limits or GrpcLimits()
    server = grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            # answers are counted by admission before they are encoded (reserve_response), so they
            # may be as large as --max-response-bytes allows, whatever the request limit
            ("grpc.max_send_message_length", max(max_message_bytes, max_response_bytes)),
            ("grpc.so_reuseport", int(reuse_port)),
            *limits.channel_options(),
        ],
        maximum_concurrent_rpcs=limits.grpc_maximum_concurrent_rpcs,
    )
    servicer = servicer or InferenceServicer(plane, max_response_bytes)
    guard = CallGuard(
        limits.max_calls_per_peer,
        limits.max_concurrent_rpcs,
        limits.request_timeout_secs,
        limits.write_timeout_secs,
        limits.reads_per_peer,
        limits.stream_reads_per_peer,
        limits.idle_stream_secs,
        limits.reads_total,
        limits.stream_reads_total,
        cutoff,
        limits.stream_first_message_secs,
    )
    count_message = servicer.count_message

    def guarded(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        relay = servicer.relay_handler(method.rsplit("/", 1)[-1])
        if relay is not None:  # relayed as bytes (an intake's servicer)
            return guard.wrap(relay)
        if method.endswith(("/ModelInfer", "/ModelStreamInfer")):  # raw tensors stay in the bytes received
            reader = MessageReader(parse_infer_request, peak_bytes)
            return guard.wrap(decoding_handler(handler, method, plane.workers.codec, count_message, reader))
        return guard.wrap(decoding_handler(handler, method, plane.workers.codec))

    registration = WrappedRegistration(server, guarded)
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, registration)
    registration.check_registered("inference.GRPCInferenceService")
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"cannot bind gRPC to {address}: the address is in use or not available")
    if not address.startswith("unix:"):
        guard.ports = (port,)
    return server


async def stop_serving(server: grpc.aio.Server, cutoff: DrainCutoff, grace: float) -> None:
    """Shut a public gRPC listener down once the unary calls it had accepted are answered.

    grpc's shutdown sends GOAWAY and closes each connection as soon as its last call is over: with
    client frames still unread, closing resets the connection and drops the answer bytes the kernel
    had not yet sent (one of 24 answers was lost so). So grpc's shutdown begins only once every
    unary call accepted before the shutdown began has its answer written: the client reads those
    answers before it acknowledges the GOAWAY's ping, which grpc awaits before it closes. Calls that
    arrive meanwhile (usually milliseconds: the answers of work already accepted) are served, not
    refused, and not waited for: GOAWAY is what moves a client's next calls to another server, and
    it should not wait on a steady stream of them. Streams are left to grpc's grace, as before."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + grace
    cutoff.closing = True
    log.info("gRPC: %d accepted call(s) to answer before GOAWAY", cutoff.unanswered)
    await cutoff.answered(grace)
    await server.stop(grace=max(0.0, ends - loop.time()))
