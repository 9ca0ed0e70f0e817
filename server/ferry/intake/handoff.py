"""The hand-off between an intake process and the model process: tensors in shared memory,
typed messages over a unix socket (``handoff_messages``: JSON arrays decoded into records, never
pickle, so nothing that reaches the socket can make a process run code; what one side sends in one
loop turn leaves as one frame, one write).

Protocol (one socket per intake process):

1. The intake connects to the hub socket and sends ``Hello``: its *request arena*, a memfd only it
   writes. The hub maps it read-only, creates a *response arena* for this intake and answers
   ``Welcome``. The intake sends ``Ready`` once its ports accept connections.
2. ``Infer``: the intake wrote every input tensor into one block of its arena and describes the
   request. The model process reads the tensors in place (read-only numpy views), runs the request
   through its data plane and answers ``Result`` or ``Failed``; either answer frees the request
   block (until then the model process may read it). A small answer (``INLINE_BYTES``) carries its
   outputs in its frame (raw bytes after the frame's JSON): nothing to give back. A larger one is
   written into one block of the response arena; the intake copies the outputs out and sends ``Free``, giving the block
   back; for a block of ``ACK_FREE_BYTES`` or more, ``Free(block, ack=call)``, answered
   ``Freed(call)`` once the block is uncounted, and only then does the intake go on with the
   answer. ``Cancel``: the caller went away; the model process cancels the call and still answers,
   so the request block is freed only once nothing reads it.
3. ``Describe``: an intake process running the front half of an image request
   (``intake.front_half``) asks which load of the model serves (name, version) now: ``Described``
   (``intake.model_directory``: its identity, and unless ``known`` is that identity already, its
   config, labels and whether an intake may pre-process for it) or ``Failed`` as one process would
   answer. An ``Infer`` may name the identity its tensors were pre-processed for (``expect``); if
   another load serves by then, the model process answers ``Stale`` instead of running it. An
   ``Infer`` from a ``ModelStreamInfer`` stream says so (``streamed``): for a decoupled model the
   model process answers ``Decoupled`` instead of running it, and the intake's stream relays that
   request to the model process's own gRPC server, whose responses stream from there.
4. ``Stats``: what the intake's stages record for a model (images decoded, requests refused as
   invalid), added to that load's statistics.
5. ``DescribeRegion``: a client's system shared memory region as the model process registered it,
   for the intake to mirror (``intake.region_mirror``): ``Described`` or ``Failed``. An ``Infer``
   whose inputs the intake read from regions (and whose outputs it will write there) names their
   generations (``regions``); one unregistered or registered again since is answered
   ``RegionsChanged`` without running.

A block that does not fit in its arena at that moment travels in a memfd of its own (a *spill*),
opened through /proc like the arenas and closed when answered or freed, so a large request never
waits for room and never goes through the socket. Admission (``--max-inflight-bytes``) bounds how
much memory all of this holds: the request block on the request's ticket, the response block in the
model process's row until freed; an inline answer was counted by the intake before the model ran
(outputs as large as the inputs) and lives in the model process only until its frame is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import mmap
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import msgspec
import numpy as np

from ferry_client.codec.datatypes import numpy_dtype
from ferry_client.codec.tensors import decode_bytes_elements, encode_bytes_elements

from ..api.admission import Admission, Ticket
from ..api.received_body import HeapBody, ReceivedBody
from ..api.shared_memory import SharedMemoryRegistry
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
from ..types import ANSWER_PARAMETERS, InferenceRequest, InferenceResponse, OutputTensor

if TYPE_CHECKING:  # the model process's: an intake never imports them
    from ..inference.plain_plans import PlainPlan
    from ..scheduling.interface import Answered, BatchAnswers, Outputs
from .handoff_messages import (
    LENGTH_BYTES,
    Block,
    Cancel,
    Decoupled,
    Describe,
    Described,
    DescribeRegion,
    Failed,
    Free,
    Freed,
    Hello,
    Infer,
    Message,
    Output,
    Ready,
    RegionGone,
    RegionsChanged,
    Result,
    Results,
    Stale,
    Stats,
    Tensor,
    ToIntake,
    ToModel,
    Welcome,
    Wire,
)
from .memory import FirstFit, Segment, aligned, pages_to_give_back
from .region_mirror import RegionMirror

log = logging.getLogger("ferry.intake")

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

#: An answer this small travels in its ``Result`` (after the frame's JSON): no response block to
#: allocate, and no ``Free`` to send back. A classifier's scores or an embedding fit.
INLINE_BYTES = 16 * 1024
#: What one ``Results`` carries at most of a batch's answers of ``INLINE_BYTES`` or less each (a
#: larger batch's answers go in several).
JOINED_BYTES = 1024 * 1024

#: How often an intake mirrors a request's regions again after ``RegionsChanged`` (an unregister
#: or a registration under the same name since it mirrored them) before the model process reads them.
STALE_REGION_TRIES = 2

_ERRORS: dict[ErrorKind, type[FerryError]] = {
    ErrorKind.INVALID_ARGUMENT: InvalidArgument,
    ErrorKind.NOT_FOUND: NotFound,
    ErrorKind.UNAVAILABLE: Unavailable,
    ErrorKind.UNIMPLEMENTED: Unimplemented,
    ErrorKind.PAYLOAD_TOO_LARGE: PayloadTooLarge,
}


class HandoffLost(Unavailable):
    """The other process is gone: requests in flight cannot be answered."""


class RegionsMoved(Unavailable):
    """The model process answered ``RegionsChanged``: the intake mirrors the regions again."""


class MirrorUnread(Exception):
    """An input could not be read through the intake's mirror (shrunk, out of bounds, or a mirror
    of a registration gone since): the model process reads it and answers as it would."""


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
    """Frames of typed messages (``handoff_messages.Wire``): every message sent in one loop turn
    goes out in one frame and one write, and each frame received is decoded in one call."""

    def __init__(self, wire: Wire, on_message: Callable[[Any], None], on_lost: Callable[[], None]) -> None:
        self._wire = wire
        self._on_message = on_message
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._inbox = bytearray()
        self._outbox: list[bytes] = []
        self._payloads: list[bytearray] = []  # inline answers' data, after the frame's JSON

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
        while end - start >= LENGTH_BYTES:
            size = int.from_bytes(inbox[start : start + LENGTH_BYTES], "little")
            if end - start - LENGTH_BYTES < size:
                break
            begin = start + LENGTH_BYTES
            messages = self._wire.decode(memoryview(inbox)[begin : begin + size])
            start = begin + size
            for message in messages:
                self._on_message(message)
        del inbox[:start]

    def send(self, message: Message) -> None:
        """Queue ``message`` for this loop turn's frame (encoded now: one that cannot be encoded
        fails its sender, not the frame)."""
        encoded, payload = self._wire.encode(message)
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(encoded)
        if payload is not None:
            self._payloads.append(payload)

    def _flush(self) -> None:
        if self._transport is not None and self._outbox:
            self._transport.write(Wire.frame(self._outbox, self._payloads))
        self._outbox = []
        self._payloads = []

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
        self._counted: dict[Block, Callable[[], None]] = {}
        self._name = name
        self._touched = 0  # the end of the highest block allocated since pages were last given back
        self._sweep_due = False
        self._allocations = 0  # blocks allocated so far: the sweep's way to see the arena was used
        self._idle_since = 0  # ``_allocations`` when the arena last fell idle with a sweep due

    def allocate(self, nbytes: int, count: Count | None = None) -> tuple[Block, mmap.mmap, int]:
        """Room for ``nbytes``: the block (for the other side), the buffer and the offset in it.
        ``count`` counts the bytes against admission (and may refuse them) until the block is freed."""
        uncount = None if count is None else count(nbytes)
        self._allocations += 1
        try:
            offset = self._fit.allocate(nbytes)
            if offset is not None:
                block = Block(False, offset, nbytes)
                buffer, base = self.arena.buffer, offset
                self._touched = max(self._touched, offset + nbytes)
            else:
                spill = Segment.create(f"{self._name}-spill", nbytes)
                self._spills[spill.fd] = spill
                block, buffer, base = Block(True, spill.fd, nbytes), spill.buffer, 0
        except BaseException:
            if uncount is not None:
                uncount()
            raise
        if uncount is not None:
            self._counted[block] = uncount
        return block, buffer, base

    def free(self, block: Block) -> None:
        uncount = self._counted.pop(block, None)
        key = block.key
        if not block.spill:
            size, free_start, free_end = self._fit.free(key)
            if size >= GIVE_BACK_AT_ONCE:
                self.arena.give_back(*pages_to_give_back(key, size, free_start, free_end, KEEP_RESIDENT))
            if not self._fit.used_bytes and self._touched > KEEP_RESIDENT and not self._sweep_due:
                self._idle_since = self._allocations
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
        """Give back every page past ``KEEP_RESIDENT`` if the arena has stayed idle since the sweep
        was due; if it was used and is idle again, look again ``IDLE_GIVE_BACK_S`` from now; if it
        is in use, the next time it falls idle. Idle now is not enough: with batched answers an
        intake's arena falls idle for a moment at every batch, and its pages were given back and
        faulted in again every ``IDLE_GIVE_BACK_S`` under steady load."""
        self._sweep_due = False
        if self._fit.used_bytes or self._touched <= KEEP_RESIDENT or self.arena.buffer.closed:
            return
        if self._allocations != self._idle_since:  # used meanwhile, idle again: wait from now
            self._idle_since = self._allocations
            self._sweep_due = True
            asyncio.get_running_loop().call_later(IDLE_GIVE_BACK_S, self._sweep)
            return
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

    def buffer(self, block: Block) -> tuple[mmap.mmap, int]:
        """The mapping holding ``block`` and the block's offset in it."""
        if not block.spill:
            return self.arena.buffer, block.key
        spill = Segment.open(self.pid, block.key, block.size)
        spill.close()  # the mapping stays valid; numpy views keep it alive
        return spill.buffer, 0

    def close(self) -> None:
        self.arena.release()


def _payload(array: np.ndarray) -> np.ndarray | bytes:
    """What goes into a block: the array itself, or BYTES elements length-prefixed."""
    if array.dtype == object:
        return encode_bytes_elements(array)
    return array


def _layout(arrays: list[tuple[str, np.ndarray]]) -> tuple[list[tuple[str, np.ndarray, np.ndarray | bytes]], int]:
    """What each array puts in a block (``_payload``) and the block's size (each one aligned)."""
    payloads = [(name, array, _payload(array)) for name, array in arrays]
    return payloads, sum(aligned(_size(payload)) for _, _, payload in payloads)


def _size(payload: np.ndarray | bytes) -> int:
    return payload.nbytes if isinstance(payload, np.ndarray) else len(payload)


def _fill(buffer: Any, base: int, payloads: list[tuple[str, np.ndarray, np.ndarray | bytes]]) -> list[Tensor]:
    """Write the payloads one after the other from ``base``; describe where each one is."""
    tensors: list[Tensor] = []
    offset = 0
    for name, array, payload in payloads:
        size = _size(payload)
        if isinstance(payload, np.ndarray):
            target = np.ndarray(array.shape, array.dtype, buffer=buffer, offset=base + offset)
            np.copyto(target, array, casting="no")
            tensors.append(Tensor(name, array.dtype.str, array.shape, offset, size))
        else:
            buffer[base + offset : base + offset + size] = payload
            tensors.append(Tensor(name, None, array.shape, offset, size))
        offset += aligned(size)
    return tensors


def _write_tensors(
    blocks: Blocks, arrays: list[tuple[str, np.ndarray]], count: Count | None = None
) -> tuple[Block, list[Tensor]]:
    """Write named arrays into one block (counted by ``count`` until freed)."""
    payloads, total = _layout(arrays)
    block, buffer, base = blocks.allocate(total, count)
    return block, _fill(buffer, base, payloads)


class ArenaBody:
    """A REST body received with its binary section in a block of the intake's request arena
    (``api/received_body.py``; the JSON header apart, on the heap): its tensors go to the model
    process where the kernel wrote them, with no copy, and tensors of requests received one after
    the other lie one after the other, as the batcher's ``in_place`` takes them. The block is
    counted on the request's ticket before it exists, and freed once neither the door nor the
    model process uses it (each ``release``s its use)."""

    __slots__ = ("parts", "block", "_blocks", "_address", "_users")
    parts: tuple[memoryview, ...]

    def __init__(self, blocks: Blocks, json_bytes: int, nbytes: int, ticket: Ticket) -> None:
        ticket.reserve(json_bytes)  # the header's bytes, counted before they are allocated
        self.block, buffer, base = blocks.allocate(nbytes - json_bytes, ticket.hold)
        section = memoryview(buffer)[base : base + nbytes - json_bytes]
        self.parts = (memoryview(bytearray(json_bytes)), section)
        self._blocks = blocks
        self._address = np.frombuffer(section, np.uint8).ctypes.data
        self._users = 1  # the door's

    def lend(self, blocks: Blocks, arrays: list[tuple[str, np.ndarray]]) -> tuple[Block, list[Tensor]] | None:
        """The block and where each array lies in it, when it is a block of ``blocks`` and all the
        arrays are views of it (not JSON-typed inputs, not BYTES elements), for the model process
        to read until it answers (then ``release``); else None."""
        if blocks is not self._blocks:
            return None
        tensors: list[Tensor] = []
        for name, array in arrays:
            if array.dtype.hasobject or not array.flags.c_contiguous:
                return None
            offset = array.ctypes.data - self._address
            if offset < 0 or offset + array.nbytes > self.block.size:
                return None
            tensors.append(Tensor(name, array.dtype.str, array.shape, offset, array.nbytes))
        self._users += 1
        return self.block, tensors

    def release(self) -> None:
        self._users -= 1
        if self._users == 0:
            self._blocks.free(self.block)


def _read_tensors(buffer: Any, base: int, tensors: list[Tensor], copy: bool) -> dict[str, np.ndarray]:
    """Arrays over a block (views, or copies when the block is about to be given back)."""
    arrays: dict[str, np.ndarray] = {}
    for tensor in tensors:
        start = base + tensor.offset
        if tensor.dtype is None:
            count = int(np.prod(tensor.shape, dtype=np.int64))
            view = memoryview(buffer)[start : start + tensor.size]
            arrays[tensor.name] = decode_bytes_elements(tensor.name, view, count).reshape(tensor.shape)
        else:
            array = np.ndarray(tensor.shape, np.dtype(tensor.dtype), buffer=buffer, offset=start)
            arrays[tensor.name] = array.copy() if copy else array
    return arrays


def _free_after(free: Callable[[], None], done: asyncio.Future[None]) -> None:
    """Give a block back once the read into it has ended (its outcome no longer matters)."""
    if not done.cancelled():
        done.exception()
    free()


def _failed(call: int, exc: BaseException) -> Failed:
    """``exc`` as the answer to ``call``."""
    if isinstance(exc, FerryError):
        return Failed(call, exc.kind.name, exc.message, getattr(exc, "retry_after", None))
    return Failed(call, ErrorKind.INTERNAL.name, f"internal error: {exc}")


def _rebuild_error(failed: Failed) -> FerryError:
    kind = ErrorKind[failed.kind]
    if kind is ErrorKind.UNAVAILABLE:
        return Unavailable(failed.message, retry_after=failed.retry_after)
    cls = _ERRORS.get(kind)
    return cls(failed.message) if cls is not None else FerryError(failed.message, kind)


# --- intake side -----------------------------------------------------------------------------


class HandoffClient:
    """An intake process's end: ``infer`` sends a request to the model process and awaits its answer."""

    def __init__(self, row: int, arena_bytes: int) -> None:
        self.row = row
        self._requests = Blocks("ferry-requests", arena_bytes)
        self._responses: PeerBlocks | None = None
        self._channel = FramedChannel(Wire(ToIntake), self._on_message, self._on_lost)
        self._pending: dict[int, tuple[asyncio.Future, Callable[[], None]]] = {}  # and what frees its block
        self._questions: dict[int, asyncio.Future] = {}  # describe calls: no blocks
        self._freeing: dict[int, tuple[asyncio.Future, InferenceResponse]] = {}  # answers awaiting Freed
        self._calls = itertools.count()
        self._welcome: asyncio.Future[Welcome] | None = None
        self.lost = asyncio.Event()
        self.regions: RegionMirror | None = None  # with shared memory allowed: its regions, mirrored here

    async def connect(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        self._welcome = loop.create_future()
        await loop.create_unix_connection(lambda: self._channel, path)
        arena = self._requests.arena
        self._channel.send(Hello(self.row, os.getpid(), arena.fd, arena.size))
        welcome = await self._welcome
        self._responses = PeerBlocks(welcome.pid, welcome.arena_fd, welcome.arena_size)

    def receive_body(self, nbytes: int, json_bytes: int, ticket: Ticket) -> ReceivedBody:
        """Memory for a REST body (``InferencePlane.receive_body``): its binary section in a block of
        this intake's arena when it has one (``ArenaBody``), else the heap."""
        if 0 < json_bytes < nbytes:
            return ArenaBody(self._requests, json_bytes, nbytes, ticket)
        return HeapBody(nbytes, ticket)

    def send_ready(self) -> None:
        self._channel.send(Ready())

    async def describe(self, name: str, version: str, known: str) -> dict[str, Any]:
        """The model process's description of the load serving (name, version) (see the protocol)."""
        if self.lost.is_set():
            raise HandoffLost("the model process is not reachable; retry later", retry_after=1)
        call = next(self._calls)
        future = asyncio.get_running_loop().create_future()
        self._questions[call] = future
        self._channel.send(Describe(call, name, version, known))
        try:
            description: dict[str, Any] = await future
            return description
        finally:
            self._questions.pop(call, None)

    async def describe_region(self, owner: str, name: str) -> dict[str, Any]:
        """The model process's description of ``owner``'s region ``name`` (``RegionMirror``)."""
        if self.lost.is_set():
            raise HandoffLost("the model process is not reachable; retry later", retry_after=1)
        call = next(self._calls)
        future = asyncio.get_running_loop().create_future()
        self._questions[call] = future
        self._channel.send(DescribeRegion(call, owner, name))
        try:
            description: dict[str, Any] = await future
            return description
        finally:
            self._questions.pop(call, None)

    def record(self, identity: str, kind: str, args: list[Any]) -> None:
        """Statistics the intake's stages record for a model, added there (fire and forget)."""
        if not self.lost.is_set():
            self._channel.send(Stats(identity, kind, args))

    async def infer(
        self, request: InferenceRequest, expect: str | None = None, streamed: bool = False
    ) -> InferenceResponse:
        """``request`` run by the model process; ``expect``: the identity of the load it was
        pre-processed for (``StaleModel`` when another serves by then); ``streamed``: it came on a
        stream (``DecoupledModel`` when its model is decoupled)."""
        if self.lost.is_set():
            raise HandoffLost("the model process is not reachable; retry later", retry_after=1)
        for key in ("priority", "timeout"):  # checked here: JSON would carry NaN as null (left out)
            int_parameter(request, key)
        mirror = self.regions
        if mirror is not None and (
            request.shared_memory_inputs or any(o.shared_memory is not None for o in request.outputs or ())
        ):
            for _ in range(STALE_REGION_TRIES):
                generations = await mirror.mirror(request)
                if generations is None:
                    break
                try:
                    return await self._infer_mirrored(mirror, request, generations, expect, streamed)
                except RegionsMoved:
                    mirror.forget(request.client, list(generations))
                except MirrorUnread:
                    mirror.forget(request.client, list(generations))
                    break
        # the block is a copy of the inputs that lives until the model process answers: counted
        # (and refused past the cap) on the request's own ticket, as one process counts its copies
        arrays = list(request.inputs.items())
        received = request.received
        lent = received.lend(self._requests, arrays) if isinstance(received, ArenaBody) else None
        if lent is not None:
            assert isinstance(received, ArenaBody)
            (block, tensors), free = lent, received.release
        else:
            count = None if request.ticket is None else request.ticket.hold
            block, tensors = _write_tensors(self._requests, arrays, count)
            free = functools.partial(self._requests.free, block)
        return await self._call(self._message(request, block, tensors, expect, streamed), free)

    def _message(
        self, request: InferenceRequest, block: Block, tensors: list[Tensor], expect: str | None, streamed: bool
    ) -> Infer:
        """The ``Infer`` of ``request`` with its inputs at ``tensors`` of ``block``, as it stands."""
        return Infer(
            next(self._calls),
            request.model_name,
            request.model_version,
            request.id,
            block,
            tensors,
            request.input_datatypes,
            request.outputs,
            request.parameters,
            request.shared_memory_inputs,
            request.client,
            sorted(request.preprocessed),
            expect,
            streamed,
            0 if request.ticket is None else request.ticket.own,  # what this request holds here
        )

    async def _infer_mirrored(
        self,
        mirror: RegionMirror,
        request: InferenceRequest,
        generations: dict[str, int],
        expect: str | None,
        streamed: bool,
    ) -> InferenceResponse:
        """``infer`` with the inputs in shared memory read here, through ``mirror``, into the
        request's block (after its other inputs), and its outputs asked into shared memory written
        here from the answer: the model process sees a plain request."""
        payloads, total = _layout(list(request.inputs.items()))
        shared = list(request.shared_memory_inputs.items())
        size = total + sum(aligned(s.ref.byte_size) for _, s in shared)
        count = None if request.ticket is None else request.ticket.hold
        block, buffer, base = self._requests.allocate(size, count)
        free = functools.partial(self._requests.free, block)
        datatypes = dict(request.input_datatypes)
        reading: asyncio.Future[None] | None = None
        try:
            tensors = _fill(buffer, base, payloads)
            offset = total
            for name, input_ in shared:
                start = base + offset
                target = memoryview(buffer)[start : start + input_.ref.byte_size]
                reading = mirror.read_into(request.client, name, input_, target)
                if reading is not None:
                    await asyncio.shield(reading)
                    reading = None
                dtype = numpy_dtype(input_.datatype).str
                tensors.append(Tensor(name, dtype, tuple(input_.shape), offset, input_.ref.byte_size))
                datatypes[name] = input_.datatype
                offset += aligned(input_.ref.byte_size)
        except FerryError as exc:
            free()
            raise MirrorUnread from exc
        except BaseException:
            if reading is not None and not reading.done():  # cancelled: the thread still writes into the block
                reading.add_done_callback(functools.partial(_free_after, free))
            else:
                free()
            raise
        into = {o.name: o.shared_memory for o in request.outputs or () if o.shared_memory is not None}
        outputs = request.outputs
        if into:
            assert outputs is not None
            outputs = [dataclasses.replace(o, shared_memory=None) for o in outputs]
        # the model process sees a plain request: the shared inputs are in the block, no output goes to a region
        message = msgspec.structs.replace(
            self._message(request, block, tensors, expect, streamed),
            datatypes=datatypes,
            outputs=outputs,
            shared={},
            regions=generations,
        )
        response = await self._call(message, free)
        for output in response.outputs:
            ref = into.get(output.name)
            if ref is not None:
                await mirror.write(request.client, output, ref)
        return response

    async def _call(self, message: Infer, free: Callable[[], None]) -> InferenceResponse:
        """Send ``message`` and await its answer; ``free`` gives its request block back once the
        model process no longer reads it."""
        call = message.call
        try:
            self._channel.send(message)
        except BaseException:
            free()
            raise
        future = asyncio.get_running_loop().create_future()
        self._pending[call] = (future, free)
        try:
            return await future
        except asyncio.CancelledError:
            if call in self._pending:
                self._channel.send(Cancel(call))
            raise

    def _on_message(self, message: ToIntake) -> None:
        match message:
            case Result():
                self._on_result(message)
            case Results():
                self._on_results(message)
            case Failed(call=call):
                future = self._settle(call) or self._questions.pop(call, None)
                if future is not None and not future.done():
                    future.set_exception(_rebuild_error(message))
            case Stale(call=call):
                self._fail(call, StaleModel("the model was reloaded during the request; try again", retry_after=0))
            case RegionsChanged(call=call):
                self._fail(call, RegionsMoved("a shared memory region changed during the request", retry_after=0))
            case RegionGone(owner=owner, name=name, generation=generation):
                if self.regions is not None:
                    self.regions.gone(owner, name, generation)
            case Decoupled(call=call):
                self._fail(call, DecoupledModel("a decoupled model: its responses stream from the model process"))
            case Described(call=call, description=description):
                question = self._questions.pop(call, None)
                if question is not None and not question.done():
                    question.set_result(description)
            case Freed(call=call):
                self._on_freed(call)
            case Welcome():
                if self._welcome is not None and not self._welcome.done():
                    self._welcome.set_result(message)

    def _settle(self, call: int) -> asyncio.Future | None:
        """Forget a call and free its request block: the model process no longer reads it."""
        entry = self._pending.pop(call, None)
        if entry is None:
            return None
        future, free = entry
        free()
        return future

    def _fail(self, call: int, error: FerryError) -> None:
        future = self._settle(call)
        if future is not None and not future.done():
            future.set_exception(error)

    def _on_result(self, result: Result) -> None:
        future = self._settle(result.call)
        block = result.block
        if future is None or future.done():
            if block is not None:
                self._channel.send(Free(block))
            return
        if block is None:  # inline: views of the message's own bytes
            arrays = _read_tensors(result.data, 0, [o.tensor for o in result.outputs], copy=False)
        else:
            assert self._responses is not None
            buffer, base = self._responses.buffer(block)
            arrays = _read_tensors(buffer, base, [o.tensor for o in result.outputs], copy=True)
        tensors = [
            OutputTensor(o.tensor.name, o.datatype, arrays[o.tensor.name], o.binary, o.shared_memory)
            for o in result.outputs
        ]
        response = InferenceResponse(result.model, result.version, result.id, tensors, result.parameters)
        if block is None or block.size < ACK_FREE_BYTES:
            future.set_result(response)
            if block is not None:
                self._channel.send(Free(block))
        else:  # answered once the model process has uncounted the block: see ACK_FREE_BYTES
            self._freeing[result.call] = (future, response)
            self._channel.send(Free(block, result.call))

    def _on_results(self, results: Results) -> None:
        """A batch's answers: each call's outputs are views of its stride of the message's data."""
        tensors = [o.tensor for o in results.outputs]
        for index, (call, request_id) in enumerate(zip(results.calls, results.ids, strict=True)):
            future = self._settle(call)
            if future is None or future.done():
                continue
            arrays = _read_tensors(results.data, index * results.stride, tensors, copy=False)
            outputs = [
                OutputTensor(o.tensor.name, o.datatype, arrays[o.tensor.name], o.binary, o.shared_memory)
                for o in results.outputs
            ]
            future.set_result(InferenceResponse(results.model, results.version, request_id, outputs, {}))

    def _on_freed(self, call: int) -> None:
        entry = self._freeing.pop(call, None)
        if entry is not None and not entry[0].done():
            entry[0].set_result(entry[1])

    def _on_lost(self) -> None:
        self.lost.set()
        for call in list(self._freeing):  # the answers were copied out; the blocks went with the process
            self._on_freed(call)
        for call in list(self._pending):
            self._fail(call, HandoffLost("the model process went away during the request", retry_after=1))
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

RunRequest = Callable[[InferenceRequest], Any]  # DataPlane.infer


class Plans(Protocol):
    """The data plane's plans for handed-off requests of a signature checked once
    (``inference.plain_plans``): one is made from a request, checked to be still current (its load
    still serves the name and version asked for), and requests of its signature queued with it."""

    def plan(self, request: InferenceRequest, expect: str | None) -> PlainPlan | None: ...

    def current(self, plan: PlainPlan, name: str, version: str) -> bool: ...

    def queue_planned(
        self, plan: PlainPlan, inputs: dict[str, np.ndarray], ticket: Ticket | None, answers: BatchAnswers, tag: Any
    ) -> Answered | None: ...


#: An answer's output: name, datatype, array, binary, and where it went in shared memory (None: not there).
AnswerTensor = tuple[str, str, np.ndarray, bool, dict[str, Any] | None]
#: A planned request's answer: its call, its request id, its outputs in its plan's order (None: left out).
Answer = tuple[int, str, list[np.ndarray | None]]

#: Signatures whose plans one intake's connection keeps (a client varying its shapes without end
#: makes plans no faster than it makes requests: past this many they all go and are made again).
PLANS_KEPT = 256

#: DataPlane.infer_soon: the request queued now, its answer to the callback (None: ``RunRequest`` serves it)
StartRequest = Callable[
    [InferenceRequest, Callable[[InferenceResponse | BaseException], None]], "asyncio.Future | None"
]


class HubConnection:
    """One intake process as the model process sees it: its arena, our response arena, its calls."""

    def __init__(self, hub: HandoffHub) -> None:
        self._hub = hub
        self.channel = FramedChannel(Wire(ToModel), self._on_message, self._on_lost)
        self.row = -1
        self.pid = 0
        self.ready = False
        self._requests: PeerBlocks | None = None
        self._responses: Blocks | None = None
        # a queued execution's future, the task serving it, or a planned request (``Answered``)
        self._calls: dict[int, asyncio.Future | Answered] = {}
        self._plans: dict[tuple, PlainPlan] = {}
        self.handed_off = 0

    def _on_message(self, message: ToModel) -> None:
        match message:
            case Infer():
                self.handed_off += 1
                self._infer(message)
            case Free(block=block, ack=ack):
                assert self._responses is not None
                self._responses.free(block)
                if ack is not None:
                    self.channel.send(Freed(ack))
            case Describe():
                self.channel.send(self._describe(message))
            case DescribeRegion(call=call, owner=owner, name=name):
                try:
                    self.channel.send(Described(call, self._hub.shared_memory.describe(owner, name)))
                except FerryError as exc:
                    self.channel.send(_failed(call, exc))
            case Stats(identity=identity, kind=kind, args=args):
                if self._hub.models is not None:
                    self._hub.models.record(identity, kind, args)
            case Cancel(call=call):
                handle = self._calls.get(call)
                if handle is not None:
                    handle.cancel()
            case Hello():
                self.row, self.pid = message.row, message.pid
                self._requests = PeerBlocks(message.pid, message.arena_fd, message.arena_size)
                self._responses = Blocks(f"ferry-responses-{self.row}", self._hub.arena_bytes)
                arena = self._responses.arena
                self.channel.send(Welcome(os.getpid(), arena.fd, arena.size))
            case Ready():
                self.ready = True
                self._hub.on_ready(self)

    def _describe(self, question: Describe) -> Described | Failed:
        try:
            if self._hub.models is None:
                raise Unimplemented("this model process describes no models")
            return Described(question.call, self._hub.models.describe(question.model, question.version, question.known))
        except FerryError as exc:
            return _failed(question.call, exc)

    def _infer(self, message: Infer) -> None:
        """Start one handed-off request, in the loop turn its frame arrived (the frame's requests one
        after the other, no task each): a plain execution is queued at once (``DataPlane.infer_soon``)
        and answered from its future's callback; anything more (images to decode, shared memory, a
        cached model) runs as a task through ``infer``. Either holds a ticket of this process's
        admission (the intake's holds the request's slot and its ``elsewhere`` bytes), so what the
        model process holds for it is counted here: images it decodes, an engine's working memory."""
        if self._hub.plans is not None and self._planned(message, self._hub.plans):
            return
        call = message.call
        ticket: Ticket | None = None
        try:
            if self._stale(message):
                self._send(call, Stale(call))
                return
            if self._streams_elsewhere(message):
                self._send(call, Decoupled(call))
                return
            if message.regions and not self._hub.shared_memory.current(message.client, message.regions):
                self._send(call, RegionsChanged(call))
                return
            request = self._request(message)
            admission = self._hub.admission
            ticket = request.ticket = None if admission is None else admission.handed_off(message.elsewhere)
            start = self._hub.infer_soon
            handle = None if start is None else start(request, functools.partial(self._answered, call, ticket))
            if handle is None:
                handle = asyncio.get_running_loop().create_task(self._serve(call, request, ticket))
            self._calls[call] = handle
        except Exception as exc:  # refused before it was queued
            if ticket is not None:
                ticket.close()
            self._answered(call, None, exc)

    def _planned(self, message: Infer, plans: Plans) -> bool:
        """Queue a request of a signature this connection has a plan for (one made now, for a new
        signature), answered with its batch's (``answer``). False when it takes ``_infer``'s way:
        parameters other than ``ANSWER_PARAMETERS``, shared memory, images pre-processed, a
        stream, or no plan for such requests; also when the plan's version stopped taking requests
        (the whole path retries on the next)."""
        if message.shared or message.preprocessed or message.regions or message.streamed:
            return False
        if message.parameters and not message.parameters.keys() <= ANSWER_PARAMETERS:
            return False
        key = _plan_key(message)
        try:
            plan = self._plans.get(key)
        except TypeError:  # a parameter's value of no hashable JSON type (a list): not for a plan
            return False
        ticket: Ticket | None = None
        try:
            if plan is None or not plans.current(plan, message.model, message.version):
                plan = plans.plan(self._request(message), message.expect)
                if plan is None:
                    return False
                if len(self._plans) >= PLANS_KEPT:
                    self._plans.clear()
                self._plans[key] = plan
            assert self._requests is not None
            buffer, base = self._requests.buffer(message.block)
            inputs = _read_tensors(buffer, base, message.inputs, copy=False)
            admission = self._hub.admission
            ticket = None if admission is None else admission.handed_off(message.elsewhere)
            handle = plans.queue_planned(plan, inputs, ticket, self, (message.call, ticket, plan, message.id))
        except Exception as exc:  # refused before it was queued
            if ticket is not None:
                ticket.close()
            self._answered(message.call, None, exc)
            return True
        if handle is None:
            if ticket is not None:
                ticket.close()
            return False
        self._calls[message.call] = handle
        return True

    def answer(self, outcomes: list[tuple[Any, Outputs | BaseException]]) -> None:
        """A batch's planned requests answered (``BatchAnswers``): each plan's successes together
        (``_send_results``), in this loop turn's frame."""
        answered: dict[PlainPlan, list[Answer]] = {}
        for (call, ticket, plan, request_id), outcome in outcomes:
            if isinstance(outcome, BaseException):
                self._answered(call, ticket, outcome)
                continue
            try:
                arrays = plan.answered(outcome)
            except Exception as exc:
                self._answered(call, ticket, exc)
                continue
            if ticket is not None:
                ticket.close()
            self._calls.pop(call, None)
            answered.setdefault(plan, []).append((call, request_id, arrays))
        for plan, answers in answered.items():
            try:
                self._send_results(plan, answers)
            except Exception as exc:  # every call is answered, or its intake would wait forever
                log.exception("unexpected error answering a batch of handed-off requests")
                for call, _, _ in answers:
                    self._send(call, _failed(call, exc))

    def _send_results(self, plan: PlainPlan, answers: list[Answer]) -> None:
        """One ``Results`` for the answers whose outputs have the first one's shapes and dtypes
        (none left out, none BYTES), when two or more of 16 KiB or less each fit; a ``Result``
        each for the others."""
        first = answers[0][2]
        forms = [None if a is None or a.dtype.hasobject else (a.shape, a.dtype) for a in first]
        stride = sum(aligned(a.nbytes) for a in first if a is not None)
        together: list[Answer] = []
        alone: list[Answer] = []
        if None not in forms and stride <= INLINE_BYTES:
            for answer in answers:
                same = all(
                    a is not None and (a.shape, a.dtype) == form for a, form in zip(answer[2], forms, strict=True)
                )
                (together if same else alone).append(answer)
        if len(together) < 2:
            together, alone = [], answers
        for call, request_id, arrays in alone:
            outputs = [
                (name, datatype, array, binary, None)
                for (name, datatype, binary), array in zip(plan.answers, arrays, strict=True)
                if array is not None
            ]
            self._send(call, self._result(call, plan.model.name, plan.version, request_id, {}, outputs))
        per_message = max(1, JOINED_BYTES // max(stride, 1))
        for start in range(0, len(together), per_message):
            self._send_joined(plan, together[start : start + per_message], stride)

    def _send_joined(self, plan: PlainPlan, answers: list[Answer], stride: int) -> None:
        """One ``Results``: ``answers`` (outputs of one shape and dtype each) one after the other
        at ``stride``, each output of all of them written in one copy."""
        data = bytearray(stride * len(answers))
        described = []
        offset = 0
        for index, (name, datatype, binary) in enumerate(plan.answers):
            first = answers[0][2][index]
            assert first is not None
            column = np.ndarray(
                (len(answers), *first.shape),
                first.dtype,
                buffer=data,
                offset=offset,
                strides=(stride, *_contiguous_strides(first)),
            )
            np.stack([cast(np.ndarray, arrays[index]) for _, _, arrays in answers], out=column)
            described.append(
                Output(Tensor(name, first.dtype.str, first.shape, offset, first.nbytes), datatype, binary, None)
            )
            offset += aligned(first.nbytes)
        calls = [call for call, _, _ in answers]
        ids = [request_id for _, request_id, _ in answers]
        self.channel.send(Results(calls, ids, plan.model.name, plan.version, described, stride, data=data))

    async def _serve(self, call: int, request: InferenceRequest, ticket: Ticket | None) -> None:
        """A request ``DataPlane.infer`` serves (see ``_infer``)."""
        outcome: InferenceResponse | BaseException
        try:
            outcome = await self._hub.infer(request)
        except (Exception, asyncio.CancelledError) as exc:
            outcome = exc
        finally:
            if ticket is not None:
                ticket.close()
        del request  # the views of the request block go before the answer frees it
        self._answered(call, None, outcome)

    def _answered(self, call: int, ticket: Ticket | None, outcome: InferenceResponse | BaseException) -> None:
        """Answer ``call`` with its response or error; every failure is answered, or the intake
        would wait forever."""
        if ticket is not None:
            ticket.close()
        self._calls.pop(call, None)
        reply: ToIntake
        try:
            if isinstance(outcome, asyncio.CancelledError):
                reply = Failed(call, ErrorKind.CANCELLED.name, "the request was cancelled")
            elif isinstance(outcome, BaseException):
                if not isinstance(outcome, FerryError):
                    log.error("unexpected error in a handed-off request", exc_info=outcome)
                reply = _failed(call, outcome)
            else:
                outputs = [(o.name, o.datatype, o.data, o.binary, o.shared_memory) for o in outcome.outputs]
                reply = self._result(
                    call, outcome.model_name, outcome.model_version, outcome.id, outcome.parameters, outputs
                )
        except Exception as exc:
            log.exception("unexpected error answering a handed-off request")
            reply = _failed(call, exc)
        self._send(call, reply)

    def _send(self, call: int, reply: ToIntake) -> None:
        try:
            self.channel.send(reply)
        except FerryError as exc:  # an answer JSON cannot carry (a model's parameters): the intake still gets one
            if isinstance(reply, Result) and reply.block is not None and self._responses is not None:
                self._responses.free(reply.block)
            self.channel.send(Failed(call, ErrorKind.INTERNAL.name, f"the answer cannot be handed back: {exc}"))

    def _stale(self, message: Infer) -> bool:
        """Whether the request was pre-processed for a load of its model that no longer serves
        (checked in the same loop iteration that hands it to the data plane, which resolves the
        model before its first await). A model gone altogether raises its not-found error."""
        if message.expect is None or self._hub.models is None:
            return False
        return self._hub.models.identity(message.model, message.version) != message.expect

    def _streams_elsewhere(self, message: Infer) -> bool:
        """Whether the request came on a stream for a decoupled model (its intake relays it here)."""
        return (
            message.streamed
            and self._hub.models is not None
            and self._hub.models.decoupled(message.model, message.version)
        )

    def _request(self, message: Infer) -> InferenceRequest:
        assert self._requests is not None
        buffer, base = self._requests.buffer(message.block)
        return InferenceRequest(
            message.model,
            message.version,
            message.id,
            _read_tensors(buffer, base, message.inputs, copy=False),
            message.datatypes,
            message.outputs,
            message.parameters,
            message.shared,
            message.client,
            frozenset(message.preprocessed),
        )

    def _result(
        self,
        call: int,
        model: str,
        version: str,
        request_id: str,
        parameters: dict[str, Any],
        outputs: Sequence[AnswerTensor],
    ) -> Result:
        """The answer (``outputs``: name, datatype, array, binary, where it went in shared memory),
        its outputs inline when small, else in a block of the response arena."""
        assert self._responses is not None
        payloads, total = _layout([(name, array) for name, _, array, _, _ in outputs])
        data: bytearray | None = None
        block: Block | None = None
        if total <= INLINE_BYTES:
            data = bytearray(total)
            tensors = _fill(data, 0, payloads)
        else:
            # counted in the model process's row until the intake frees the block (never refused:
            # the answer exists already; the intake counted its outputs before the model ran)
            admission = self._hub.admission
            block, buffer, base = self._responses.allocate(total, None if admission is None else admission.hold)
            tensors = _fill(buffer, base, payloads)
        described = [
            Output(tensor, datatype, binary, shared_memory)
            for tensor, (_, datatype, _, binary, shared_memory) in zip(tensors, outputs, strict=True)
        ]
        return Result(call, model, version, request_id, parameters, described, block=block, data=data)

    def _on_lost(self) -> None:
        """The intake died or closed: cancel its calls, then, once they have settled (their views of
        the arenas gone), unmap both arenas, so an intake killed again and again leaves nothing."""
        calls = list(self._calls.values())
        for handle in calls:
            handle.cancel()  # a planned request is answered at once; its running batch's views go with the batch
        self._hub.on_lost(self)
        awaited = [handle for handle in calls if isinstance(handle, asyncio.Future)]
        if awaited:
            asyncio.gather(*awaited, return_exceptions=True).add_done_callback(lambda _: self._release_arenas())
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
        self,
        infer: RunRequest,
        arena_bytes: int,
        models: ModelDirectory | None = None,
        admission: Admission | None = None,
        infer_soon: StartRequest | None = None,
        shared_memory: SharedMemoryRegistry | None = None,
        plans: Plans | None = None,
    ) -> None:
        self.infer = infer
        self.infer_soon = infer_soon  # None: every request runs as a task through ``infer``
        self.plans = plans  # None: no request is planned
        self.arena_bytes = arena_bytes
        self.models = models
        self.admission = admission  # counts the response blocks until the intakes free them
        self.shared_memory = shared_memory or SharedMemoryRegistry(enabled=False)  # what intakes mirror
        self.connections: set[HubConnection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._ready_changed = asyncio.Event()
        self.on_connection_lost: Callable[[HubConnection], None] = lambda connection: None

    async def start(self, path: str) -> None:
        def connection() -> FramedChannel:
            conn = HubConnection(self)
            self.connections.add(conn)
            return conn.channel

        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(connection, path)

        def unregistered(owner: str, name: str, generation: int) -> None:  # from any thread
            if not loop.is_closed():  # at shutdown the intakes go too
                loop.call_soon_threadsafe(self._tell_intakes, RegionGone(owner, name, generation))

        self.shared_memory.on_unregistered = unregistered

    def _tell_intakes(self, message: ToIntake) -> None:
        for conn in list(self.connections):
            conn.channel.send(message)

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


def _plan_key(message: Infer) -> tuple:
    """What requests sharing a plan have in common: the model and load asked for, the inputs'
    names, dtypes and shapes, their datatypes, the outputs asked for and how, the parameters."""
    outputs = None
    if message.outputs is not None:
        outputs = tuple((o.name, o.binary, o.classification, o.shared_memory is None) for o in message.outputs)
    return (
        message.model,
        message.version,
        message.expect,
        tuple((t.name, t.dtype, t.shape) for t in message.inputs),
        tuple(message.datatypes.items()),
        outputs,
        tuple(message.parameters.items()),
    )


def _contiguous_strides(array: np.ndarray) -> tuple[int, ...]:
    """The strides of a C-contiguous array of ``array``'s shape and dtype."""
    strides = []
    step = array.itemsize
    for size in reversed(array.shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))
