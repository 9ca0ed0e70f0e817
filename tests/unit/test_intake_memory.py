"""What the hand-off holds in memory (issue 24): freed arena pages given back to the system, every
block counted against ``--max-inflight-bytes`` while it exists (the request's in the intake's row,
refused past the cap before anything is copied; the answer's in the model process's row), and an
admission hold that outlives its request."""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferry.api.admission import Admission
from ferry.errors import PayloadTooLarge, Unavailable
from ferry.intake.handoff import IDLE_GIVE_BACK_S, KEEP_RESIDENT, Blocks, HandoffClient, HandoffHub
from ferry.intake.memory import FirstFit, pages_to_give_back
from ferry.types import InferenceRequest, InferenceResponse, OutputTensor

pytestmark = pytest.mark.timeout(60)
PAGE = mmap.PAGESIZE
MIB = 2**20


@settings(max_examples=300)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 6 * PAGE)), max_size=60), st.integers(0, 4 * PAGE))
def test_pages_given_back_are_free_and_all_free_pages_past_the_kept_start_are(
    steps: list[tuple[bool, int]], keep: int
) -> None:
    fit = FirstFit(32 * PAGE)
    live: dict[int, int] = {}
    resident: set[int] = set()  # pages touched and not given back
    for allocate, size in steps:
        if allocate or not live:
            offset = fit.allocate(size)
            if offset is not None:
                live[offset] = size
                resident |= set(range(offset // PAGE, (offset + size - 1) // PAGE + 1))
            continue
        offset = sorted(live)[size % len(live)]
        del live[offset]
        start, length = pages_to_give_back(offset, *fit.free(offset), keep)
        assert start % PAGE == 0 and length % PAGE == 0 and start >= keep
        given_back = set(range(start // PAGE, (start + length) // PAGE))
        for other, other_size in live.items():  # never a page a live block uses
            assert not given_back & set(range(other // PAGE, (other + other_size - 1) // PAGE + 1))
        resident -= given_back
    used = {p for o, s in live.items() for p in range(o // PAGE, (o + s - 1) // PAGE + 1)}
    kept = set(range(-(-keep // PAGE)))
    assert resident <= used | kept  # nothing free stays resident past the kept start


def _allocated(blocks: Blocks) -> int:
    return os.fstat(blocks.arena.fd).st_blocks * 512  # the memfd's pages in memory


def test_an_arena_keeps_only_its_start_resident_once_its_blocks_are_freed() -> None:
    blocks = Blocks("test-arena", 32 * MIB)
    try:
        small, buffer, base = blocks.allocate(MIB)
        large, buffer, base = blocks.allocate(20 * MIB)
        buffer[base : base + 20 * MIB] = b"\x01" * (20 * MIB)  # the burst: 20 MiB touched
        assert _allocated(blocks) >= 20 * MIB
        blocks.free(large)
        assert _allocated(blocks) <= KEEP_RESIDENT
        blocks.free(small)
        assert _allocated(blocks) <= KEEP_RESIDENT
        again, buffer, base = blocks.allocate(20 * MIB)
        assert buffer[base + 19 * MIB] == 0  # a page given back reads as zeros; nothing breaks
        blocks.free(again)
    finally:
        blocks.close()


async def test_small_blocks_keep_their_pages_until_the_arena_is_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The give-back waits for the arena to be idle for ``IDLE_GIVE_BACK_S``: the test takes the timer
    the arena sets and fires it itself, once after the arena was busy again and once while idle."""
    timers: list[tuple[float, Callable[[], object]]] = []
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "call_later", lambda delay, callback: timers.append((delay, callback)))
    blocks = Blocks("test-arena", 32 * MIB)
    try:
        held = []
        for _ in range(12):  # 12 blocks of 1 MiB in use at once: past the kept 8 MiB
            where, buffer, base = blocks.allocate(MIB)
            buffer[base : base + MIB] = b"\x01" * MIB
            held.append(where)
        for where in held[1:]:
            blocks.free(where)
        assert _allocated(blocks) >= 12 * MIB and not timers  # still busy: the next requests reuse the pages
        blocks.free(held[0])  # idle now: the give-back is due in IDLE_GIVE_BACK_S
        assert [delay for delay, _ in timers] == [IDLE_GIVE_BACK_S]
        busy_again, _, _ = blocks.allocate(MIB)  # a request comes before the timer fires
        timers.pop()[1]()
        assert _allocated(blocks) >= 12 * MIB  # busy when it fired: nothing given back
        blocks.free(busy_again)  # idle again: a new timer, and this time the arena is idle when it fires
        assert [delay for delay, _ in timers] == [IDLE_GIVE_BACK_S]
        timers.pop()[1]()
        assert _allocated(blocks) <= KEEP_RESIDENT
    finally:
        blocks.close()


async def test_an_arena_used_again_before_the_give_back_keeps_its_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """With batched answers an arena falls idle for a moment at every batch: a give-back due then
    must not find it idle by chance when it fires (busy and idle again meanwhile, as under load)."""
    timers: list[tuple[float, Callable[[], object]]] = []
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "call_later", lambda delay, callback: timers.append((delay, callback)))
    blocks = Blocks("test-arena", 32 * MIB)
    try:
        held = []
        for _ in range(12):  # one intake's requests of a batch, past the kept 8 MiB
            where, buffer, base = blocks.allocate(MIB)
            buffer[base : base + MIB] = b"\x01" * MIB
            held.append(where)
        for where in held:  # the batch is answered: idle, the give-back due
            blocks.free(where)
        assert [delay for delay, _ in timers] == [IDLE_GIVE_BACK_S]
        blocks.free(blocks.allocate(MIB)[0])  # the next request came and was answered meanwhile
        timers.pop()[1]()
        assert _allocated(blocks) >= 12 * MIB  # used since it was due: the pages stay
        assert [delay for delay, _ in timers] == [IDLE_GIVE_BACK_S]  # idle now: it looks again later
        timers.pop()[1]()
        assert _allocated(blocks) <= KEEP_RESIDENT
    finally:
        blocks.close()


def test_a_hold_is_refused_like_a_reservation_and_may_outlive_its_request() -> None:
    admission = Admission(max_bytes=100)
    with admission.admit() as ticket:
        release = ticket.hold(60)
        assert admission.bytes == 60
        with pytest.raises(PayloadTooLarge):  # its own 60 + 50: this request alone passes the cap
            ticket.hold(50)
        with admission.admit() as other, pytest.raises(Unavailable):  # 60 held by another request
            other.reserve(50)
    assert admission.bytes == 60  # the block is still in the other process after the request ended
    release()
    release()
    assert admission.bytes == 0


class Doubler:
    """The model process's data plane, reduced to one answer: each input doubled."""

    def __init__(self) -> None:
        self.gate: asyncio.Event | None = None
        self.seen = 0

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self.seen += 1
        if self.gate is not None:
            await self.gate.wait()
        outputs = [OutputTensor(f"{n}_out", "FP32", a * 2) for n, a in request.inputs.items()]
        return InferenceResponse(request.model_name, "1", request.id, outputs)


@contextlib.asynccontextmanager
async def _pair(tmp_path: Path, model_side: Admission) -> AsyncIterator[tuple[Doubler, HandoffClient]]:
    model = Doubler()
    hub = HandoffHub(model.infer, 4 * MIB, admission=model_side)
    await hub.start(str(tmp_path / "hub.sock"))
    client = HandoffClient(1, 4 * MIB)
    try:
        await client.connect(str(tmp_path / "hub.sock"))
        yield model, client
    finally:
        client.close()
        await hub.close()


async def _infer_admitted(admission: Admission, client: HandoffClient, x: np.ndarray) -> InferenceResponse:
    with admission.admit() as ticket:  # the intake's front door: the ticket on the request
        return await client.infer(InferenceRequest("m", inputs={"x": x}, ticket=ticket))


async def test_the_hand_off_counts_each_block_while_it_exists(tmp_path: Path) -> None:
    intake, model_side = Admission(max_bytes=8 * MIB), Admission()
    async with _pair(tmp_path, model_side) as (model, client):
        model.gate = asyncio.Event()
        x = np.ones(MIB // 4, np.float32)  # 1 MiB, in the arena, and a 1 MiB answer
        call = asyncio.create_task(_infer_admitted(intake, client, x))
        while not model.seen:
            await asyncio.sleep(0.01)
        assert intake.bytes == MIB  # the request's block, on its ticket while the model process reads it
        model.gate.set()
        answer = await call
        np.testing.assert_array_equal(answer.outputs[0].data, x * 2)
        # the answer's block (counted in the model process's row) was uncounted before the intake went
        # on with the answer (ACK_FREE_BYTES): nothing is left counted anywhere
        assert (intake.bytes, model_side.bytes) == (0, 0)


async def test_a_request_whose_block_passes_the_cap_is_refused_before_it_is_copied(tmp_path: Path) -> None:
    intake = Admission(max_bytes=2 * MIB)
    async with _pair(tmp_path, Admission()) as (model, client):
        with intake.admit() as ticket:
            ticket.reserve(MIB + 1)  # its body, say
            with pytest.raises(PayloadTooLarge, match="--max-inflight-bytes"):
                await client.infer(InferenceRequest("m", inputs={"x": np.ones(MIB // 4, np.float32)}, ticket=ticket))
        assert model.seen == 0 and client._requests.used_bytes == 0 and intake.bytes == 0
