"""An intake's mirror of client shared memory regions (``intake/region_mirror.py``) over a real
hand-off socket, with the model process's registry and the intake's mirror on real files in a
temporary directory (standing in for /dev/shm): the model process gets a plain request whose
input is a read-only view of the intake's arena, the output lands in its region, a region
registered again is read anew, and a cancelled request's block outlives the read into it."""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferry.api.limits import OFF_LOOP_BYTES, Limits
from ferry.api.shared_memory import SharedMemoryRegistry
from ferry.intake.handoff import HandoffClient, HandoffHub
from ferry.intake.region_mirror import RegionMirror
from ferry.types import (
    InferenceRequest,
    InferenceResponse,
    OutputTensor,
    RequestedOutput,
    SharedMemoryInput,
    SharedMemoryRef,
)

pytestmark = pytest.mark.timeout(60)
OWNER = "token:a"


class GatedPool(ThreadPoolExecutor):
    """A worker pool whose calls start only once ``gate`` is set (a read held mid-way)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.gate = threading.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        def gated() -> Any:
            self.gate.wait(30)
            return fn(*args, **kwargs)

        return super().submit(gated)


class Model:
    """The model process's data plane reduced to what the test sees: each request, doubled back."""

    def __init__(self) -> None:
        self.seen: list[InferenceRequest] = []

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self.seen.append(request)
        outputs = [OutputTensor(f"{name}_out", "INT32", array * 2) for name, array in request.inputs.items()]
        return InferenceResponse(request.model_name, "1", request.id, outputs)


@contextlib.asynccontextmanager
async def _pair(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> AsyncIterator[tuple[Model, SharedMemoryRegistry, HandoffClient]]:
    model = Model()
    registry = SharedMemoryRegistry(root=tmp_path)
    hub = HandoffHub(model.infer, 1 << 22, shared_memory=registry)
    await hub.start(str(tmp_path / "hub.sock"))
    client = HandoffClient(1, 1 << 22)
    client.regions = RegionMirror(client.describe_region, SharedMemoryRegistry(root=tmp_path), Limits(), pool)
    try:
        await client.connect(str(tmp_path / "hub.sock"))
        yield model, registry, client
    finally:
        client.close()
        await hub.close()
        registry.close()
        client.regions.registry.close()


def _request(region: str, size: int, output: str | None = None) -> InferenceRequest:
    shared = {"y": SharedMemoryInput("INT32", (size // 4,), SharedMemoryRef(region, 0, size))}
    outputs = None if output is None else [RequestedOutput("y_out", shared_memory=SharedMemoryRef(output, 0, size))]
    return InferenceRequest("m", outputs=outputs, shared_memory_inputs=shared, client=OWNER)


async def test_the_intake_reads_regions_into_its_arena_and_writes_outputs_into_theirs(tmp_path: Path) -> None:
    with ThreadPoolExecutor(1) as pool:
        async with _pair(tmp_path, pool) as (model, registry, client):
            (tmp_path / "in").write_bytes(np.arange(16, dtype=np.int32).tobytes())
            (tmp_path / "out").write_bytes(bytes(64))
            registry.register(OWNER, "in", "/in", 0, 64)
            registry.register(OWNER, "out", "/out", 0, 64)
            response = await client.infer(_request("in", 64, output="out"))
            seen = model.seen[0]
            assert seen.shared_memory_inputs == {} and seen.outputs == [RequestedOutput("y_out")]
            view = seen.inputs["y"]
            np.testing.assert_array_equal(view, np.arange(16))
            assert not view.flags.writeable and isinstance(view.base, mmap.mmap)  # the arena, read in place
            assert response.outputs[0].shared_memory == {"shared_memory_region": "out", "shared_memory_byte_size": 64}
            assert np.frombuffer((tmp_path / "out").read_bytes(), np.int32).tolist() == [2 * i for i in range(16)]

            registry.unregister(OWNER, "in")  # the intake is told: its mirror closes
            assert client.regions is not None
            for _ in range(500):  # the message crosses the socket: a few loop turns
                if client.regions.registry.count() == 1:
                    break
                await asyncio.sleep(0.01)
            assert client.regions.registry.count() == 1
            # registered again, on another object: read from that one
            (tmp_path / "other").write_bytes(np.full(16, 5, np.int32).tobytes())
            registry.register(OWNER, "in", "/other", 0, 64)
            await client.infer(_request("in", 64))
            np.testing.assert_array_equal(model.seen[-1].inputs["y"], np.full(16, 5))
            assert client.regions.registry.count() == 2  # one mirror each
            assert client._requests.used_bytes == 0


async def test_a_cancelled_request_frees_its_block_only_after_the_read_into_it(tmp_path: Path) -> None:
    pool = GatedPool()
    try:
        async with _pair(tmp_path, pool) as (model, registry, client):
            (tmp_path / "big").write_bytes(bytes(OFF_LOOP_BYTES))  # read on a worker thread
            registry.register(OWNER, "big", "/big", 0, OFF_LOOP_BYTES)
            call = asyncio.create_task(client.infer(_request("big", OFF_LOOP_BYTES)))
            while client._requests.used_bytes == 0:  # the block exists; the read waits at the gate
                await asyncio.sleep(0.01)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert client._requests.used_bytes >= OFF_LOOP_BYTES  # the thread is about to write into it
            pool.gate.set()
            while client._requests.used_bytes:
                await asyncio.sleep(0.01)
            assert model.seen == []
    finally:
        pool.gate.set()
        pool.shutdown()
