"""The hand-off protocol between an intake process and the model process, both ends in this process
over a real unix socket and real memfd segments; the model side's ``infer`` is a test function."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferry.api.admission import Admission
from ferry.api.http_codec import decode_infer_request
from ferry.errors import DecoupledModel, InvalidArgument, Unavailable
from ferry.intake.handoff import (
    INLINE_BYTES,
    ArenaBody,
    FramedChannel,
    HandoffClient,
    HandoffHub,
    HandoffLost,
    PeerBlocks,
    _read_tensors,
)
from ferry.intake.handoff_messages import Block, Free, Infer, Message, Result, Tensor
from ferry.intake.memory import ALIGNMENT, FirstFit, Segment, aligned
from ferry.intake.shared_state import BYTES, REQUESTS, SharedTable
from ferry.types import (
    InferenceRequest,
    InferenceResponse,
    OutputTensor,
    RequestedOutput,
    SharedMemoryInput,
    SharedMemoryRef,
)

pytestmark = pytest.mark.timeout(60)


# --- the arena allocator ---------------------------------------------------------------------


@settings(max_examples=200)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5000)), max_size=60))
def test_first_fit_never_overlaps_and_merges_everything_back(steps: list[tuple[bool, int]]) -> None:
    fit = FirstFit(64 * 1024)
    live: dict[int, int] = {}
    for allocate, size in steps:
        if allocate or not live:
            offset = fit.allocate(size)
            if offset is None:  # the arena is fragmented or full: the caller spills
                continue
            assert offset % ALIGNMENT == 0 and offset + size <= fit.size
            for other, other_size in live.items():
                assert offset + size <= other or other + other_size <= offset, "blocks overlap"
            live[offset] = size
        else:
            offset = sorted(live)[size % len(live)]
            fit.free(offset)
            del live[offset]
    for offset in list(live):
        fit.free(offset)
    assert fit.used_bytes == 0
    assert fit.allocate(fit.size) == 0  # every block merged back into one


def test_first_fit_reuses_the_lowest_room() -> None:
    fit = FirstFit(1024)
    a, b, c = fit.allocate(100), fit.allocate(100), fit.allocate(100)
    assert (a, b, c) == (0, 128, 256)
    fit.free(b)
    assert fit.allocate(64) == 128
    assert fit.allocate(2000) is None


def test_a_released_peer_arena_stays_mapped_while_a_view_still_reads_it() -> None:
    """An intake dies while an engine thread computes on its request: the model process releases
    the intake's arena, but the request's view must keep the mapping until it goes (numpy holds a
    reference to the mmap, not a buffer export: closing the mmap would unmap memory it reads)."""
    intake = Segment.create("ferry-test-arena", 4096)
    intake.buffer[:4] = bytes([1, 2, 3, 4])
    peer = PeerBlocks(os.getpid(), intake.fd, 4096)
    buffer, base = peer.buffer(Block(False, 0, 4))
    view = _read_tensors(buffer, base, [Tensor("x", "|u1", (4,), 0, 4)], copy=False)["x"]
    mapping = weakref.ref(peer.arena.buffer)
    del buffer
    peer.close()
    intake.release()
    assert not peer.arena.buffer.closed  # still mapped for the view
    assert list(view) == [1, 2, 3, 4]
    del peer, view
    assert mapping() is None  # unmapped with the last view
    other = Segment.create("ferry-test-arena", 4096)
    unused = PeerBlocks(os.getpid(), other.fd, 4096)
    unused.close()
    other.release()
    assert unused.arena.buffer.closed and other.buffer.closed  # nothing reads them: unmapped at once


# --- client and hub over a real socket -------------------------------------------------------


class Model:
    """The model process's data plane, reduced to what a test needs to see and control."""

    def __init__(self) -> None:
        self.seen: list[InferenceRequest] = []
        self.gate: asyncio.Event | None = None
        self.cancelled = 0

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self.seen.append(request)
        if self.gate is not None:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if request.model_name == "bad":
            raise InvalidArgument("input 'x' is wrong")
        if request.model_name == "busy":
            raise Unavailable("busy", retry_after=3)
        if request.model_name == "broken":
            raise RuntimeError("boom")
        outputs = [
            OutputTensor(f"{name}_out", "FP32", array * 2, binary=True) for name, array in request.inputs.items()
        ]
        words = np.array([b"cat", b"", b"\x00dog"], dtype=object)
        outputs.append(OutputTensor("labels", "BYTES", words))
        return InferenceResponse(request.model_name, "1", request.id, outputs, {"sequence": 7})


class Directory:
    """The model process's directory, reduced to which models are decoupled."""

    def __init__(self, decoupled: set[str]) -> None:
        self._decoupled = decoupled

    def describe(self, name: str, version: str, known: str) -> dict:
        raise NotImplementedError

    def identity(self, name: str, version: str) -> str:
        return f"{name}\x00{version}\x000"

    def decoupled(self, name: str, version: str) -> bool:
        return name in self._decoupled

    def record(self, identity: str, kind: str, args: list) -> None:
        pass


@contextlib.asynccontextmanager
async def _pair(
    tmp_path: Path, arena_bytes: int = 1 << 20, models: Directory | None = None
) -> AsyncIterator[tuple[Model, HandoffHub, HandoffClient]]:
    """Both ends connected and ready; closed (both, whatever the test closed already) on exit."""
    model = Model()
    hub = HandoffHub(model.infer, arena_bytes, models)
    await hub.start(str(tmp_path / "hub.sock"))
    client = HandoffClient(1, arena_bytes)
    try:
        await client.connect(str(tmp_path / "hub.sock"))
        client.send_ready()
        await asyncio.wait_for(hub.wait_ready({1}), 10)
        yield model, hub, client
    finally:
        client.close()
        await hub.close()


async def test_tensors_parameters_and_bytes_make_the_round_trip(tmp_path: Path) -> None:
    async with _pair(tmp_path) as (model, hub, client):
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        images = np.array([b"\xff\xd8jpeg", b""], dtype=object)
        request = InferenceRequest(
            "m",
            "2",
            "req-1",
            {"x": x[:, ::2], "images": images},  # a non-contiguous view is copied correctly
            {"x": "FP32", "images": "BYTES"},
            [
                RequestedOutput("x_out", binary=True, classification=2),
                RequestedOutput("labels", shared_memory=SharedMemoryRef("region", 64, 1024)),
            ],
            {"priority": 1},
            {"y": SharedMemoryInput("INT8", (2, 3), SharedMemoryRef("region", 0, 6))},
        )
        response = await client.infer(request)
        seen = model.seen[0]
        assert (seen.model_name, seen.model_version, seen.id, seen.parameters) == ("m", "2", "req-1", {"priority": 1})
        assert seen.outputs == request.outputs and seen.input_datatypes == request.input_datatypes
        assert seen.shared_memory_inputs == request.shared_memory_inputs
        np.testing.assert_array_equal(seen.inputs["x"], x[:, ::2])
        assert not seen.inputs["x"].flags.writeable  # the model process reads the intake's arena in place
        assert list(seen.inputs["images"]) == [b"\xff\xd8jpeg", b""]
        assert (response.model_name, response.model_version, response.id) == ("m", "1", "req-1")
        assert response.parameters == {"sequence": 7}
        np.testing.assert_array_equal(response.outputs[0].data, x[:, ::2] * 2)
        assert response.outputs[0].binary is True and response.outputs[0].datatype == "FP32"
        assert list(response.outputs[2].data) == [b"cat", b"", b"\x00dog"]


async def test_blocks_are_given_back_after_every_answer(tmp_path: Path) -> None:
    async with _pair(tmp_path) as (model, hub, client):
        x = np.ones((64, 64), np.float32)
        results = await asyncio.gather(*(client.infer(InferenceRequest("m", inputs={"x": x})) for _ in range(50)))
        assert len(results) == 50
        with pytest.raises(InvalidArgument):
            await client.infer(InferenceRequest("bad", inputs={"x": x}))
        await asyncio.sleep(0)  # the last "free" leaves on the next loop iteration
        for _ in range(100):
            if not any(c.response_bytes for c in hub.connections):
                break
            await asyncio.sleep(0.01)
        assert client._requests.used_bytes == 0
        assert [c.response_bytes for c in hub.connections] == [0]


async def test_tensors_larger_than_the_arena_travel_in_their_own_segment(tmp_path: Path) -> None:
    async with _pair(tmp_path, arena_bytes=4096) as (model, hub, client):
        big = np.random.default_rng(0).random((512, 512), dtype=np.float32)  # 1 MiB, the arena holds 4 KiB
        response = await client.infer(InferenceRequest("m", inputs={"x": big}))
        np.testing.assert_array_equal(response.outputs[0].data, big * 2)
        assert client._requests.used_bytes == 0


async def test_a_streamed_request_to_a_decoupled_model_is_answered_decoupled_not_run(tmp_path: Path) -> None:
    """Marked as streamed, a request to a decoupled model is not run: the intake relays it instead
    (``DecoupledModel``), and its block is freed. Unmarked (``ModelInfer``), it runs, and the data
    plane gives Triton's error; a streamed request to another model runs as any other."""
    async with _pair(tmp_path, models=Directory({"talker"})) as (model, hub, client):
        x = np.ones((2, 2), np.float32)
        with pytest.raises(DecoupledModel):
            await client.infer(InferenceRequest("talker", inputs={"x": x}), streamed=True)
        assert model.seen == []
        assert client._requests.used_bytes == 0
        answer = await client.infer(InferenceRequest("m", inputs={"x": x}), streamed=True)
        np.testing.assert_array_equal(answer.outputs[0].data, x * 2)
        await client.infer(InferenceRequest("talker", inputs={"x": x}))
        assert [seen.model_name for seen in model.seen] == ["m", "talker"]


async def test_errors_keep_their_kind_message_and_retry_after(tmp_path: Path) -> None:
    async with _pair(tmp_path) as (model, hub, client):
        x = {"x": np.zeros(1, np.float32)}
        with pytest.raises(InvalidArgument, match="input 'x' is wrong"):
            await client.infer(InferenceRequest("bad", inputs=x))
        with pytest.raises(Unavailable) as busy:
            await client.infer(InferenceRequest("busy", inputs=x))
        assert busy.value.retry_after == 3
        with pytest.raises(Exception, match="internal error: boom") as broken:
            await client.infer(InferenceRequest("broken", inputs=x))
        assert broken.value.http_status == 500


async def _held_call(model: Model, client: HandoffClient, x: np.ndarray) -> asyncio.Task:
    """A call the model process has received and holds until ``model.gate`` opens."""
    model.gate = asyncio.Event()
    call = asyncio.create_task(client.infer(InferenceRequest("m", inputs={"x": x})))
    while not model.seen:
        await asyncio.sleep(0.01)
    return call


async def test_a_cancelled_call_is_cancelled_in_the_model_process_and_its_block_freed(tmp_path: Path) -> None:
    async with _pair(tmp_path) as (model, hub, client):
        call = await _held_call(model, client, np.ones(1000, np.float32))
        assert client._requests.used_bytes > 0  # held while the model process may still read it
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        while model.cancelled == 0 or client._requests.used_bytes:
            await asyncio.sleep(0.01)
        assert client.in_flight == 0


async def test_a_rest_body_received_into_the_arena_is_read_there_by_the_model_process(tmp_path: Path) -> None:
    """The REST door received a body's binary section into a block of the arena (``ArenaBody``):
    the model process reads the tensor at that very place, no second block is written, and the
    block lives until both the door and the model process are done with it."""
    async with _pair(tmp_path) as (model, hub, client):
        admission = Admission(8, 64 * 2**20)
        ticket = admission.admit()
        x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
        entry = {"name": "x", "shape": list(x.shape), "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}
        header = json.dumps({"inputs": [entry]}).encode()
        received = client.receive_body(len(header) + x.nbytes, len(header), ticket)
        assert isinstance(received, ArenaBody)
        assert admission.bytes >= len(header) + x.nbytes  # counted before the body arrives
        received.parts[0][:] = header  # what the door's read writes, part after part
        received.parts[1][:] = x.tobytes()
        json_part, blob = (part.toreadonly() for part in received.parts)
        request = decode_infer_request("m", "", json_part, None, blob=blob)
        request.received, request.ticket = received, ticket
        model.gate = asyncio.Event()
        call = asyncio.create_task(client.infer(request))
        while not model.seen:
            await asyncio.sleep(0.01)
        assert client._requests.used_bytes == aligned(x.nbytes)  # the body's block alone: no copy written
        seen = model.seen[0].inputs["x"]
        np.testing.assert_array_equal(seen, x)
        [connection] = hub.connections
        arena = np.frombuffer(connection._requests.arena.buffer, np.uint8)
        assert seen.ctypes.data == arena.ctypes.data + received.block.key  # read where it was received
        received.release()  # the door is done (its caller left, say): the model process still reads
        assert client._requests.used_bytes == aligned(x.nbytes)
        model.gate.set()
        await call
        assert client._requests.used_bytes == 0
        ticket.close()
        assert admission.bytes == 0


async def test_calls_in_flight_fail_with_unavailable_when_the_model_process_goes_away(tmp_path: Path) -> None:
    async with _pair(tmp_path) as (model, hub, client):
        call = await _held_call(model, client, np.ones(4, np.float32))
        await hub.close()
        with pytest.raises(HandoffLost, match="went away"):
            await call
        with pytest.raises(HandoffLost, match="not reachable"):
            await client.infer(InferenceRequest("m", inputs={"x": np.ones(4, np.float32)}))


def _frames(channel: FramedChannel) -> list[list[Message]]:
    """Every frame ``channel`` receives from now on, as the messages decoded from it."""
    frames: list[list[Message]] = []
    wire = channel._wire
    decode = wire.decode

    def spy(body: memoryview | bytes) -> list[Message]:
        frames.append(decode(body))
        return frames[-1]

    wire.decode = spy  # type: ignore[method-assign]
    return frames


async def test_a_batch_of_answers_reaches_its_intake_in_one_frame(tmp_path: Path) -> None:
    """Calls answered together (as a batch's are) leave the model process in one frame, one write,
    decoded in one call; so do an intake's calls sent in one loop turn."""
    async with _pair(tmp_path) as (model, hub, client):
        (connection,) = hub.connections
        to_model, to_intake = _frames(connection.channel), _frames(client._channel)
        model.gate = asyncio.Event()
        x = np.ones(16, np.float32)
        calls = [asyncio.create_task(client.infer(InferenceRequest("m", id=str(i), inputs={"x": x}))) for i in range(8)]
        while len(model.seen) < 8:
            await asyncio.sleep(0.01)
        model.gate.set()
        answers = await asyncio.gather(*calls)
        assert [answer.id for answer in answers] == [str(i) for i in range(8)]
        assert [[type(m) for m in frame] for frame in to_model] == [[Infer] * 8]
        assert [[type(m) for m in frame] for frame in to_intake] == [[Result] * 8]


async def test_a_small_answer_travels_in_its_result_and_nothing_is_freed(tmp_path: Path) -> None:
    """An answer of ``INLINE_BYTES`` or less is carried in its ``Result``: no response block, no
    ``Free``. A larger one goes through the response arena and is freed after it is read."""
    async with _pair(tmp_path) as (model, hub, client):
        (connection,) = hub.connections
        to_model = _frames(connection.channel)
        small = np.arange(100, dtype=np.float32)
        answer = await client.infer(InferenceRequest("m", inputs={"x": small}))
        np.testing.assert_array_equal(answer.outputs[0].data, small * 2)
        answer.outputs[0].data[0] = -1  # the caller's own array, as one from a block's copy is
        large = np.ones(INLINE_BYTES // 4 + 1, np.float32)
        answer = await client.infer(InferenceRequest("m", inputs={"x": large}))
        np.testing.assert_array_equal(answer.outputs[0].data, large * 2)
        while len(to_model) < 3:
            await asyncio.sleep(0.01)
        assert [type(m) for frame in to_model for m in frame] == [Infer, Infer, Free]
        assert connection.response_bytes == 0


async def test_a_request_the_hand_off_cannot_carry_is_refused_and_its_block_freed(tmp_path: Path) -> None:
    """Parameters JSON cannot carry (nested past the recursion limit) are the caller's 400, and the
    copy of its inputs is freed and uncounted at once; the connection serves the next call."""
    nested: list = []
    for _ in range(5000):
        nested = [nested]
    admission = Admission(max_bytes=1 << 20)
    async with _pair(tmp_path) as (model, hub, client):
        x = {"x": np.ones(1000, np.float32)}
        with admission.admit() as ticket:
            request = InferenceRequest("m", inputs=x, parameters={"deep": nested}, ticket=ticket)
            with pytest.raises(InvalidArgument, match="cannot travel between Ferry's processes as JSON"):
                await client.infer(request)
            assert (client._requests.used_bytes, admission.bytes) == (0, 0)
        answer = await client.infer(InferenceRequest("m", inputs=x))
        np.testing.assert_array_equal(answer.outputs[0].data, x["x"] * 2)
        assert model.seen[0].parameters == {}


# --- the shared counters ---------------------------------------------------------------------


def test_each_process_adds_to_its_row_and_everyone_reads_the_sum() -> None:
    import os

    table = SharedTable.create(3)
    other = SharedTable.attach(os.getpid(), table.segment.fd, 3)  # as an intake process maps it
    table.counts(0).add(REQUESTS, 1)
    other.counts(2).add(REQUESTS, 2)
    other.counts(2).add(BYTES, 100)
    assert table.counts(1).total(REQUESTS) == 3 and table.column_total(BYTES) == 100
    other.clear_row(2)
    assert table.column_total(REQUESTS) == 1 and table.column_total(BYTES) == 0
