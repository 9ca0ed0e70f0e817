"""An intake's mirror of the client shared memory regions it serves requests for.

Why: with intake processes, the model process is the one serial core; reading every request's
region there (a ``pread`` of the whole tensor on its event loop, then the slow path of a request
with shared memory) made system shared memory dearer with intakes than in one process. An intake
mirrors a region the first time a request names it (the model process's registry describes it:
key, window, generation, object) and opens the object once: each request's inputs are then read
from it straight into the request's arena block, which the model process reads in place like any
other tensor, and its outputs are written into their regions here, from the answer.

Every protection of the registry holds, since the mirror is a ``SharedMemoryRegistry`` too: the key
opened without following links, a regular object of an accepted owner, the very object the model
process registered (device and inode), the window's and each request's bounds, reads and writes
through the descriptor (an object shrunk meanwhile is the caller's error, never a SIGBUS), caps on
the regions held. Registration stays the model process's: a request names the generation of each
region it used, and the model process refuses it (``RegionsChanged``: nothing ran) when one was
unregistered or registered again since; the intake then forgets it and mirrors it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from ferry_client.codec.datatypes import item_size
from ferry_client.codec.tensors import tensor_to_bytes

from ..api.limits import OFF_LOOP_BYTES, Limits
from ..api.shared_memory import SharedMemoryRegistry, check_input_size, ref_parameters
from ..errors import ErrorKind, FerryError, NotFound
from ..types import InferenceRequest, OutputTensor, SharedMemoryInput, SharedMemoryRef
from ..workers import run_in

DescribeRegion = Callable[[str, str], Awaitable[dict[str, Any]]]


class RegionMirror:
    """The regions this intake has opened, by (client, name), and the reads and writes through them."""

    def __init__(self, describe: DescribeRegion, registry: SharedMemoryRegistry, limits: Limits, pool: Executor):
        self._describe = describe
        self.registry = registry
        self._limits = limits
        self._pool = pool

    async def mirror(self, request: InferenceRequest) -> dict[str, int] | None:
        """The generation of each region ``request`` names, mirrored here; None when the model
        process should serve it as it is (a region unknown there, a CUDA region, BYTES inputs, a
        mirror refused): it answers with the precise error, or reads the regions itself."""
        owner = request.client
        for name, shared in request.shared_memory_inputs.items():
            check_input_size(self._limits, request.model_name, name, shared)
            if item_size(shared.datatype) is None:  # BYTES: the model process decodes them
                return None
        names = {s.ref.region for s in request.shared_memory_inputs.values()}
        names.update(o.shared_memory.region for o in request.outputs or () if o.shared_memory is not None)
        generations: dict[str, int] = {}
        for name in sorted(names):
            try:
                generations[name] = self.registry.describe(owner, name)["generation"]
                continue
            except NotFound:
                pass
            try:
                found = await self._describe(owner, name)
                self._register(owner, name, found)
            except FerryError:
                return None
            generations[name] = found["generation"]
        return generations

    def _register(self, owner: str, name: str, found: dict[str, Any]) -> None:
        """Open the region the model process described; past the caps, this client's other mirrors
        go first (those in use stay open until their requests end)."""
        mirrored = (found["generation"], (found["object"][0], found["object"][1]))
        try:
            self.registry.register(owner, name, found["key"], found["offset"], found["byte_size"], mirrored)
        except FerryError as exc:
            if exc.kind is not ErrorKind.RESOURCE_EXHAUSTED:
                raise
            self.registry.unregister(owner)
            self.registry.register(owner, name, found["key"], found["offset"], found["byte_size"], mirrored)

    def gone(self, owner: str, name: str, generation: int) -> None:
        """The model process unregistered that registration: its mirror here closes (``RegionGone``)."""
        try:
            mirrored = self.registry.describe(owner, name)["generation"]
        except NotFound:
            return
        if mirrored == generation:
            self.registry.unregister(owner, name)

    def forget(self, owner: str, names: list[str]) -> None:
        """Drop mirrors the model process no longer registers so (``RegionsChanged``)."""
        for name in names:
            self.registry.unregister(owner, name)

    def read_into(
        self, owner: str, name: str, shared: SharedMemoryInput, target: memoryview
    ) -> asyncio.Future[None] | None:
        """Input ``name``'s bytes from its region into ``target``: done at once (None), or, when
        large, on a worker thread (its future: until it is done the thread writes into ``target``,
        even if the request is cancelled meanwhile)."""
        if shared.ref.byte_size < OFF_LOOP_BYTES:
            self.registry.read_into(owner, shared.ref, name, target)
            return None
        return asyncio.get_running_loop().run_in_executor(
            self._pool, self.registry.read_into, owner, shared.ref, name, target
        )

    async def write(self, owner: str, output: OutputTensor, ref: SharedMemoryRef) -> None:
        """An answer's output written into its region; the output then says where, as one process says."""
        data = tensor_to_bytes(output.data, output.datatype)
        if memoryview(data).nbytes < OFF_LOOP_BYTES:
            written = self.registry.write(owner, ref, output.name, data)
        else:
            written = await run_in(self._pool, self.registry.write, owner, ref, output.name, data)
        output.shared_memory = ref_parameters(ref, written)
