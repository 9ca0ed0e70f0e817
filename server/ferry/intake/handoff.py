"""The hand-off between an intake process and the model process: tensors in shared memory,
small headers over a unix socket.

Protocol (one socket per intake process, both directions framed as a 4-byte little-endian length
and a JSON array that holds names, shapes and offsets, never tensor payloads; JSON and not pickle,
so nothing that reaches the socket can make a process run code):

1. The intake connects to the hub socket and sends ``("hello", row, pid, arena_fd, arena_size)``:
   its *request arena*, a memfd only it writes. The hub maps it read-only, creates a *response
   arena* for this intake and answers ``("welcome", pid, arena_fd, arena_size)``. The intake sends
   ``("ready",)`` once its ports accept connections.
2. ``("infer", call, header)``: the intake wrote every input tensor into one block of its arena
   and describes the request (``_pack_request``). The model process reads the tensors in place
   (read-only numpy views), runs the request through its data plane and answers
   ``("result", call, header)``, the outputs written into one block of the response arena, or
   ``("error", call, kind, message, retry_after)``. Either answer frees the request block: until
   then the model process may read it.
3. The intake copies the outputs out and sends ``("free", block)``, giving the response block
   back; for a block of ``ACK_FREE_BYTES`` or more, ``("free", block, call)``, answered
   ``("freed", call)`` once the block is uncounted, and only then does the intake go on with the
   answer. ``("cancel", call)``: the caller went away; the model process cancels the call and
   still answers, so the request block is freed only once nothing reads it.

4. ``("describe", call, model, version, known)``: an intake process running the front half of an
   image request (``intake.front_half``) asks which load of the model serves (name, version) now:
   ``("described", call, description)`` (``intake.model_directory``: its identity, and unless
   ``known`` is that identity already, its config, labels and whether an intake may pre-process
   for it) or ``("error", ...)`` as one process would answer. An ``infer`` may name the identity
   its tensors were pre-processed for (the header's last item); if another load serves by then,
   the model process answers ``("stale", call)`` instead of running it. An ``infer`` from a
   ``ModelStreamInfer`` stream says so (the header's ``streamed``): for a decoupled model the model
   process answers ``("decoupled", call)`` instead of running it, and the intake's stream relays
   that request to the model process's own gRPC server, whose responses stream from there.
5. ``("stats", identity, kind, args)``: what the intake's stages record for a model (images
   decoded, requests refused as invalid), added to that load's statistics.

A block that does not fit in its arena at that moment travels in a memfd of its own (a *spill*),
opened through /proc like the arenas and closed when answered or freed, so a large request never
waits for room and never goes through the socket. Admission (``--max-inflight-bytes``) bounds how
much memory all of this holds.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import mmap
import os
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import orjson

from ferry_client.codec.tensors import decode_bytes_elements, encode_bytes_elements

from ..api.admission import Admission
from ..errors import (
    DecoupledModel,
    ErrorKind,
    FerryError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    Unavailable,
    Unimplemented,
)
from ..inference.validation import int_parameter
from ..types import (
    InferenceRequest,
    InferenceResponse,
    OutputTensor,
    RequestedOutput,
    SharedMemoryInput,
    SharedMemoryRef,
)
from .memory import FirstFit, Segment, aligned, pages_to_give_back

log = logging.getLogger("ferry.intake")

Where = tuple[str, int, int]  # ("arena", offset, size) or ("spill", fd, size)
Count = Callable[[int], Callable[[], None] | None]  # counts bytes in admission; returns what uncounts them

#: An answer's block this large is uncounted (in the model process's row) before the intake goes on
#: with the answer, one round trip later: otherwise the answer's next reservation would find the
#: request's own block counted as another request's bytes, and be refused for it near the cap.
#: Smaller blocks are freed without waiting (what they can overstate is small).
ACK_FREE_BYTES = 256 * 1024

#: A freed block this large gives its pages back at once; faulting them in again costs about what
#: writing them does, as for a spill (a fresh memfd each time).
GIVE_BACK_AT_ONCE = 4 * 2**20

#: How long an arena stays idle (no block in use) before the pages of its small blocks past
#: ``KEEP_RESIDENT`` go: a closed loop of requests, idle for microseconds between rounds, keeps them.
IDLE_GIVE_BACK_S = 0.1

#: The start of each arena whose pages stay resident when its blocks are freed: what small requests
#: in flight at once use (a 224 x 224 RGB float image is 0.6 MB), reused without page faults.
KEEP_RESIDENT = 8 * 2**20
TensorDesc = tuple[str, str | None, tuple[int, ...], int, int]  # name, numpy dtype (None: BYTES), shape, offset, size

_LENGTH = 4
_ERRORS: dict[ErrorKind, type[FerryError]] = {
    ErrorKind.INVALID_ARGUMENT: InvalidArgument,
    ErrorKind.NOT_FOUND: NotFound,
    ErrorKind.UNAVAILABLE: Unavailable,
    ErrorKind.UNIMPLEMENTED: Unimplemented,
    ErrorKind.PAYLOAD_TOO_LARGE: PayloadTooLarge,
}


class HandoffLost(Unavailable):
    """The other process is gone: requests in flight cannot be answered."""


class StaleModel(Unavailable):
    """The model was reloaded (or another version became the one served) after the intake
    pre-processed for it: the request must be pre-processed again for the load serving now."""


class ModelDirectory(Protocol):
    """What the model process answers about its models (``intake.model_directory``)."""

    def describe(self, name: str, version: str, known: str) -> dict[str, Any]: ...

    def identity(self, name: str, version: str) -> str: ...

    def decoupled(self, name: str, version: str) -> bool: ...

    def record(self, identity: str, kind: str, args: list[Any]) -> None: ...


# --- framing ---------------------------------------------------------------------------------


class FramedChannel(asyncio.Protocol):
    """Length-prefixed JSON messages; everything sent in one loop iteration goes out in one write."""

    def __init__(self, on_message: Callable[[tuple], None], on_lost: Callable[[], None]) -> None:
        self._on_message = on_message
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._inbox = bytearray()
        self._outbox: list[bytes] = []
        self._flush_scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._on_lost()

    def data_received(self, data: bytes) -> None:
        inbox = self._inbox
        inbox += data
        start = 0
        end = len(inbox)
        while end - start >= _LENGTH:
            size = int.from_bytes(inbox[start : start + _LENGTH], "little")
            if end - start - _LENGTH < size:
                break
            begin = start + _LENGTH
            message = orjson.loads(memoryview(inbox)[begin : begin + size])
            start = begin + size
            self._on_message(message)
        del inbox[:start]

    def send(self, message: tuple) -> None:
        payload = orjson.dumps(message, option=orjson.OPT_SERIALIZE_NUMPY)  # dataclasses become objects
        self._outbox.append(len(payload).to_bytes(_LENGTH, "little") + payload)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._transport is not None and self._outbox:
            self._transport.write(b"".join(self._outbox))
        self._outbox.clear()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


# --- tensors in blocks -----------------------------------------------------------------------


class Blocks:
    """An arena this side writes (first-fit blocks) plus the spills that did not fit in it.

    Memory: a block is counted against ``--max-inflight-bytes`` while it exists (``count``). The
    pages a freed block of ``GIVE_BACK_AT_ONCE`` or more leaves free are given back at once, beyond
    the first ``KEEP_RESIDENT`` bytes (as a spill's would be); smaller blocks' pages stay for the next
    requests until the arena has been idle (no block in use) for ``IDLE_GIVE_BACK_S``, when every
    page past ``KEEP_RESIDENT`` goes: so after a burst an arena holds no more than that, and steady
    traffic of small blocks does not fault its pages in again and again.
    """

    def __init__(self, name: str, size: int) -> None:
        self.arena = Segment.create(name, size)
        self._fit = FirstFit(size)
        self._spills: dict[int, Segment] = {}
        self._counted: dict[tuple[str, int], Callable[[], None]] = {}
        self._name = name
        self._touched = 0  # the end of the highest block allocated since pages were last given back
        self._sweep_due = False

    def allocate(self, nbytes: int, count: Count | None = None) -> tuple[Where, mmap.mmap, int]:
        """Room for ``nbytes``: where it is (for the other side), the buffer and the offset in it.
        ``count`` counts the bytes against admission (and may refuse them) until the block is freed."""
        uncount = None if count is None else count(nbytes)
        try:
            offset = self._fit.allocate(nbytes)
            if offset is not None:
                where: Where = ("arena", offset, nbytes)
                buffer, base = self.arena.buffer, offset
                self._touched = max(self._touched, offset + nbytes)
            else:
                spill = Segment.create(f"{self._name}-spill", nbytes)
                self._spills[spill.fd] = spill
                where, buffer, base = ("spill", spill.fd, nbytes), spill.buffer, 0
        except BaseException:
            if uncount is not None:
                uncount()
            raise
        if uncount is not None:
            self._counted[where[:2]] = uncount
        return where, buffer, base

    def free(self, where: Where) -> None:
        kind, key, _ = where
        uncount = self._counted.pop((kind, key), None)
        if kind == "arena":
            size, free_start, free_end = self._fit.free(key)
            if size >= GIVE_BACK_AT_ONCE:
                self.arena.give_back(*pages_to_give_back(key, size, free_start, free_end, KEEP_RESIDENT))
            if not self._fit.used_bytes and self._touched > KEEP_RESIDENT and not self._sweep_due:
                try:
                    asyncio.get_running_loop().call_later(IDLE_GIVE_BACK_S, self._sweep)
                    self._sweep_due = True
                except RuntimeError:  # no event loop (a test): at once
                    self._sweep()
        else:
            self._spills.pop(key).close()
        if uncount is not None:
            uncount()

    def _sweep(self) -> None:
        """Give back every page past ``KEEP_RESIDENT`` if the arena is still idle; else the next
        time it is."""
        self._sweep_due = False
        if not self._fit.used_bytes and self._touched > KEEP_RESIDENT and not self.arena.buffer.closed:
            self.arena.give_back(*pages_to_give_back(0, self._touched, 0, self._fit.size, KEEP_RESIDENT))
            self._touched = 0

    def close(self) -> None:
        for spill in self._spills.values():
            spill.release()
        self._spills.clear()
        self.arena.release()
        for uncount in self._counted.values():
            uncount()
        self._counted.clear()

    @property
    def used_bytes(self) -> int:
        return self._fit.used_bytes


class PeerBlocks:
    """The other side's arena, mapped read-only, and its spills opened on demand."""

    def __init__(self, pid: int, arena_fd: int, arena_size: int) -> None:
        self.pid = pid
        self.arena = Segment.open(pid, arena_fd, arena_size)

    def buffer(self, where: Where) -> tuple[mmap.mmap, int]:
        """The mapping holding ``where`` and the block's offset in it."""
        kind, key, size = where
        if kind == "arena":
            return self.arena.buffer, key
        spill = Segment.open(self.pid, key, size)
        spill.close()  # the mapping stays valid; numpy views keep it alive
        return spill.buffer, 0

    def close(self) -> None:
        self.arena.release()


def _payload(array: np.ndarray) -> np.ndarray | bytes:
    """What goes into a block: the array itself, or BYTES elements length-prefixed."""
    if array.dtype == object:
        return encode_bytes_elements(array)
    return array


def _write_tensors(
    blocks: Blocks, arrays: list[tuple[str, np.ndarray]], count: Count | None = None
) -> tuple[Where, list[TensorDesc]]:
    """Write named arrays into one block (counted by ``count`` until freed); describe where each one is."""
    payloads = [(name, array, _payload(array)) for name, array in arrays]
    sizes = [payload.nbytes if isinstance(payload, np.ndarray) else len(payload) for _, _, payload in payloads]
    total = sum(aligned(size) for size in sizes)
    where, buffer, base = blocks.allocate(total, count)
    descs: list[TensorDesc] = []
    offset = 0
    for (name, array, payload), size in zip(payloads, sizes, strict=True):
        if isinstance(payload, np.ndarray):
            target = np.ndarray(array.shape, array.dtype, buffer=buffer, offset=base + offset)
            np.copyto(target, array, casting="no")
            descs.append((name, array.dtype.str, array.shape, offset, size))
        else:
            buffer[base + offset : base + offset + size] = payload
            descs.append((name, None, array.shape, offset, size))
        offset += aligned(size)
    return where, descs


def _read_tensors(buffer: Any, base: int, descs: list[TensorDesc], copy: bool) -> dict[str, np.ndarray]:
    """Arrays over a block (views, or copies when the block is about to be given back)."""
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, shape, offset, size in descs:  # shape: a JSON list
        if dtype is None:
            count = int(np.prod(shape, dtype=np.int64))
            view = memoryview(buffer)[base + offset : base + offset + size]
            arrays[name] = decode_bytes_elements(name, view, count).reshape(shape)
        else:
            array = np.ndarray(shape, np.dtype(dtype), buffer=buffer, offset=base + offset)
            arrays[name] = array.copy() if copy else array
    return arrays


def _requested_output(fields: dict[str, Any]) -> RequestedOutput:
    ref = fields["shared_memory"]
    return RequestedOutput(
        fields["name"], fields["binary"], fields["classification"], None if ref is None else SharedMemoryRef(**ref)
    )


def _shared_memory_input(fields: dict[str, Any]) -> SharedMemoryInput:
    return SharedMemoryInput(fields["datatype"], tuple(fields["shape"]), SharedMemoryRef(**fields["ref"]))


def _error_message(exc: BaseException) -> tuple[str, str, float | None]:
    if isinstance(exc, FerryError):
        return exc.kind.name, exc.message, getattr(exc, "retry_after", None)
    return ErrorKind.INTERNAL.name, f"internal error: {exc}", None


def _rebuild_error(kind_name: str, message: str, retry_after: float | None) -> FerryError:
    kind = ErrorKind[kind_name]
    if kind is ErrorKind.UNAVAILABLE:
        return Unavailable(message, retry_after=retry_after)
    cls = _ERRORS.get(kind)
    return cls(message) if cls is not None else FerryError(message, kind)


# --- intake side -----------------------------------------------------------------------------


class HandoffClient:
    """An intake process's end: ``infer`` sends a request to the model process and awaits its answer."""

    def __init__(self, row: int, arena_bytes: int) -> None:
        self.row = row
        self._requests = Blocks("ferry-requests", arena_bytes)
        self._responses: PeerBlocks | None = None
        self._channel = FramedChannel(self._on_message, self._on_lost)
        self._pending: dict[int, tuple[asyncio.Future, Where]] = {}
        self._questions: dict[int, asyncio.Future] = {}  # describe calls: no blocks
        self._freeing: dict[int, tuple[asyncio.Future, InferenceResponse]] = {}  # answers awaiting "freed"
        self._calls = itertools.count()
        self._welcome: asyncio.Future | None = None
        self.lost = asyncio.Event()

    async def connect(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        self._welcome = loop.create_future()
        await loop.create_unix_connection(lambda: self._channel, path)
        arena = self._requests.arena
        self._channel.send(("hello", self.row, os.getpid(), arena.fd, arena.size))
        _, pid, fd, size = await self._welcome
        self._responses = PeerBlocks(pid, fd, size)

    def send_ready(self) -> None:
        self._channel.send(("ready",))

    async def describe(self, name: str, version: str, known: str) -> dict[str, Any]:
        """The model process's description of the load serving (name, version) (see the protocol)."""
        if self.lost.is_set():
            raise HandoffLost("the model process is not reachable; retry later", retry_after=1)
        call = next(self._calls)
        future = asyncio.get_running_loop().create_future()
        self._questions[call] = future
        self._channel.send(("describe", call, name, version, known))
        try:
            description: dict[str, Any] = await future
            return description
        finally:
            self._questions.pop(call, None)

    def record(self, identity: str, kind: str, args: list[Any]) -> None:
        """Statistics the intake's stages record for a model, added there (fire and forget)."""
        if not self.lost.is_set():
            self._channel.send(("stats", identity, kind, args))

    async def infer(
        self, request: InferenceRequest, expect: str | None = None, streamed: bool = False
    ) -> InferenceResponse:
        """``request`` run by the model process; ``expect``: the identity of the load it was
        pre-processed for (``StaleModel`` when another serves by then); ``streamed``: it came on a
        stream (``DecoupledModel`` when its model is decoupled)."""
        if self.lost.is_set():
            raise HandoffLost("the model process is not reachable; retry later", retry_after=1)
        for key in ("priority", "timeout"):  # checked here: the JSON header would carry NaN as null (left out)
            int_parameter(request, key)
        # the block is a copy of the inputs that lives until the model process answers: counted
        # (and refused past the cap) on the request's own ticket, as one process counts its copies
        count = None if request.ticket is None else request.ticket.hold
        where, descs = _write_tensors(self._requests, list(request.inputs.items()), count)
        header = (
            request.model_name,
            request.model_version,
            request.id,
            where,
            descs,
            request.input_datatypes,
            request.outputs,
            request.parameters,
            request.shared_memory_inputs,
            request.client,
            expect,
            streamed,
            sorted(request.preprocessed),
            0 if request.ticket is None else request.ticket.own,  # what this request holds here
        )
        call = next(self._calls)
        future = asyncio.get_running_loop().create_future()
        self._pending[call] = (future, where)
        self._channel.send(("infer", call, header))
        try:
            return await future
        except asyncio.CancelledError:
            if call in self._pending:
                self._channel.send(("cancel", call))
            raise

    def _on_message(self, message: tuple) -> None:
        kind = message[0]
        if kind == "result":
            self._on_result(message[1], message[2])
        elif kind == "error":
            future = self._settle(message[1]) or self._questions.pop(message[1], None)
            if future is not None and not future.done():
                future.set_exception(_rebuild_error(*message[2:]))
        elif kind == "described":
            question = self._questions.pop(message[1], None)
            if question is not None and not question.done():
                question.set_result(message[2])
        elif kind == "stale":
            future = self._settle(message[1])
            if future is not None and not future.done():
                future.set_exception(StaleModel("the model was reloaded during the request; try again", retry_after=0))
        elif kind == "decoupled":
            future = self._settle(message[1])
            if future is not None and not future.done():
                future.set_exception(DecoupledModel("a decoupled model: its responses stream from the model process"))
        elif kind == "freed":
            self._on_freed(message[1])
        elif kind == "welcome" and self._welcome is not None:
            self._welcome.set_result(message)

    def _settle(self, call: int) -> asyncio.Future | None:
        """Forget a call and free its request block: the model process no longer reads it."""
        entry = self._pending.pop(call, None)
        if entry is None:
            return None
        future, where = entry
        self._requests.free(where)
        return future

    def _on_result(self, call: int, header: tuple) -> None:
        model_name, model_version, request_id, parameters, where, descs, outputs = header
        future = self._settle(call)
        assert self._responses is not None
        if future is None or future.done():
            self._channel.send(("free", where))
            return
        buffer, base = self._responses.buffer(where)
        arrays = _read_tensors(buffer, base, descs, copy=True)
        tensors = [
            OutputTensor(name, datatype, arrays[name], binary, shared) for name, datatype, binary, shared in outputs
        ]
        response = InferenceResponse(model_name, model_version, request_id, tensors, parameters)
        if where[2] < ACK_FREE_BYTES:
            future.set_result(response)
            self._channel.send(("free", where))
        else:  # answered once the model process has uncounted the block: see ACK_FREE_BYTES
            self._freeing[call] = (future, response)
            self._channel.send(("free", where, call))

    def _on_freed(self, call: int) -> None:
        entry = self._freeing.pop(call, None)
        if entry is not None and not entry[0].done():
            entry[0].set_result(entry[1])

    def _on_lost(self) -> None:
        self.lost.set()
        for call in list(self._freeing):  # the answers were copied out; the blocks went with the process
            self._on_freed(call)
        for call in list(self._pending):
            future = self._settle(call)
            if future is not None and not future.done():
                future.set_exception(HandoffLost("the model process went away during the request", retry_after=1))
        for question in list(self._questions.values()):
            if not question.done():
                question.set_exception(HandoffLost("the model process went away during the request", retry_after=1))
        if self._welcome is not None and not self._welcome.done():
            self._welcome.set_exception(HandoffLost("the model process closed the hand-off socket"))

    def close(self) -> None:
        self._channel.close()

    @property
    def in_flight(self) -> int:
        return len(self._pending)


# --- model process side ----------------------------------------------------------------------

Infer = Callable[[InferenceRequest], Any]  # DataPlane.infer


class HubConnection:
    """One intake process as the model process sees it: its arena, our response arena, its calls."""

    def __init__(self, hub: HandoffHub) -> None:
        self._hub = hub
        self.channel = FramedChannel(self._on_message, self._on_lost)
        self.row = -1
        self.pid = 0
        self.ready = False
        self._requests: PeerBlocks | None = None
        self._responses: Blocks | None = None
        self._calls: dict[int, asyncio.Task] = {}
        self.handed_off = 0

    def _on_message(self, message: tuple) -> None:
        kind = message[0]
        if kind == "infer":
            call = message[1]
            self._calls[call] = asyncio.get_running_loop().create_task(self._serve(call, message[2]))
            self.handed_off += 1
        elif kind == "free":
            assert self._responses is not None
            self._responses.free(message[1])
            if len(message) > 2:
                self.channel.send(("freed", message[2]))
        elif kind == "describe":
            self.channel.send(self._describe(*message[1:]))
        elif kind == "stats":
            if self._hub.models is not None:
                self._hub.models.record(*message[1:])
        elif kind == "cancel":
            task = self._calls.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == "hello":
            _, self.row, self.pid, fd, size = message
            self._requests = PeerBlocks(self.pid, fd, size)
            self._responses = Blocks(f"ferry-responses-{self.row}", self._hub.arena_bytes)
            arena = self._responses.arena
            self.channel.send(("welcome", os.getpid(), arena.fd, arena.size))
        elif kind == "ready":
            self.ready = True
            self._hub.on_ready(self)

    def _describe(self, call: int, name: str, version: str, known: str) -> tuple:
        try:
            if self._hub.models is None:
                raise Unimplemented("this model process describes no models")
            return ("described", call, self._hub.models.describe(name, version, known))
        except FerryError as exc:
            return ("error", call, *_error_message(exc))

    async def _serve(self, call: int, header: tuple) -> None:
        reply: tuple[object, ...]
        try:
            if self._stale(header):
                reply = ("stale", call)
            elif self._streams_elsewhere(header):
                reply = ("decoupled", call)
            else:
                request = self._request(header)
                response = await self._served(request, header[13])
                del request  # the views of the request block go before the answer frees it
                reply = ("result", call, self._pack_response(response))
        except asyncio.CancelledError:
            reply = ("error", call, ErrorKind.CANCELLED.name, "the request was cancelled", None)
        except Exception as exc:  # every failure is answered, or the intake would wait forever
            if not isinstance(exc, FerryError):
                log.exception("unexpected error in a handed-off request")
            reply = ("error", call, *_error_message(exc))
        finally:
            self._calls.pop(call, None)
        self.channel.send(reply)

    async def _served(self, request: InferenceRequest, elsewhere: int) -> InferenceResponse:
        """``request`` run by the data plane with a ticket of this process's admission (the
        intake's holds its slot and its ``elsewhere`` bytes), so what the model process holds for
        it is counted here: images it decodes, an engine's working memory."""
        admission = self._hub.admission
        if admission is None:
            return await self._hub.infer(request)
        with admission.handed_off(elsewhere) as ticket:
            request.ticket = ticket
            return await self._hub.infer(request)

    def _stale(self, header: tuple) -> bool:
        """Whether the request was pre-processed for a load of its model that no longer serves
        (checked in the same loop iteration that hands it to the data plane, which resolves the
        model before its first await). A model gone altogether raises its not-found error."""
        expect = header[10]
        if expect is None or self._hub.models is None:
            return False
        return self._hub.models.identity(header[0], header[1]) != expect

    def _streams_elsewhere(self, header: tuple) -> bool:
        """Whether the request came on a stream for a decoupled model (its intake relays it here)."""
        return bool(header[11]) and self._hub.models is not None and self._hub.models.decoupled(header[0], header[1])

    def _request(self, header: tuple) -> InferenceRequest:
        model, version, request_id, where, descs, datatypes, outputs, parameters, shared, client, *_ = header
        preprocessed = frozenset(header[12])
        assert self._requests is not None
        buffer, base = self._requests.buffer(where)
        return InferenceRequest(
            model,
            version,
            request_id,
            _read_tensors(buffer, base, descs, copy=False),
            datatypes,
            None if outputs is None else [_requested_output(output) for output in outputs],
            parameters,
            {name: _shared_memory_input(value) for name, value in shared.items()},
            client,
            preprocessed,
        )

    def _pack_response(self, response: InferenceResponse) -> tuple:
        assert self._responses is not None
        # counted in the model process's row until the intake frees the block (never refused: the
        # answer exists already; the intake counted its outputs before the model ran)
        admission = self._hub.admission
        count = None if admission is None else admission.hold
        where, descs = _write_tensors(self._responses, [(o.name, o.data) for o in response.outputs], count)
        outputs = [(o.name, o.datatype, o.binary, o.shared_memory) for o in response.outputs]
        return (
            response.model_name,
            response.model_version,
            response.id,
            response.parameters,
            where,
            descs,
            outputs,
        )

    def _on_lost(self) -> None:
        """The intake died or closed: cancel its calls, then, once they have settled (their views of
        the arenas gone), unmap both arenas, so an intake killed again and again leaves nothing."""
        calls = list(self._calls.values())
        for task in calls:
            task.cancel()
        self._hub.on_lost(self)
        if calls:
            asyncio.gather(*calls, return_exceptions=True).add_done_callback(lambda _: self._release_arenas())
        else:
            self._release_arenas()

    def _release_arenas(self) -> None:
        if self._responses is not None:
            self._responses.close()
        if self._requests is not None:
            self._requests.close()
        self._responses = self._requests = None  # a view that outlives its call frees the mapping

    @property
    def response_bytes(self) -> int:
        return self._responses.used_bytes if self._responses is not None else 0


class HandoffHub:
    """The model process's end: accepts intake processes on a unix socket and serves their calls."""

    def __init__(
        self, infer: Infer, arena_bytes: int, models: ModelDirectory | None = None, admission: Admission | None = None
    ) -> None:
        self.infer = infer
        self.arena_bytes = arena_bytes
        self.models = models
        self.admission = admission  # counts the response blocks until the intakes free them
        self.connections: set[HubConnection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._ready_changed = asyncio.Event()
        self.on_connection_lost: Callable[[HubConnection], None] = lambda connection: None

    async def start(self, path: str) -> None:
        def connection() -> FramedChannel:
            conn = HubConnection(self)
            self.connections.add(conn)
            return conn.channel

        self._server = await asyncio.get_running_loop().create_unix_server(connection, path)

    def on_ready(self, connection: HubConnection) -> None:
        self._ready_changed.set()

    def on_lost(self, connection: HubConnection) -> None:
        self.connections.discard(connection)
        self.on_connection_lost(connection)

    async def wait_ready(self, rows: set[int]) -> None:
        """Until an intake process of each row said its ports accept connections."""
        while not rows <= {c.row for c in self.connections if c.ready}:
            self._ready_changed.clear()
            await self._ready_changed.wait()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.channel.close()
