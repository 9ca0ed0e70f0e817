"""System shared memory regions: Triton's ``systemsharedmemory`` extension, protocol-neutral.

A client creates a POSIX shared memory object (``shm_open`` key), registers a window of it under a
name, then sends inference requests whose tensors say ``shared_memory_region`` / ``_offset`` /
``_byte_size`` instead of carrying their bytes. The REST and gRPC adapters only translate to these
calls.

Why descriptors and ``pread``/``pwrite``, not a mapping: the client owns the object and may shrink
it at any time (``ftruncate``); touching a mapped page past the new end raises SIGBUS, which kills
the process. A read or write through the descriptor just comes back short, which is a clear error
for the caller. Inputs are therefore copied out of the region (the client may also rewrite it while
the request runs), outputs copied in.

Why the checks at registration: a key is opened without following symbolic links and must name a
regular object owned by an allowed user (the server's own by default), so a key cannot reach another
user's object or a file a link points to. Each region belongs to the identity that registered it
(``security/identity.py``): other identities neither see, use nor unregister it. Regions are capped
per identity and in total, since each holds a descriptor. The whole extension is off unless the
operator enables it (``--allow-shared-memory``).

CUDA regions (Triton's ``cudasharedmemory``) live in the same registry, under the same names, owners
and caps: a client's ``cudaIpcMemHandle_t`` opened on a GPU of this server (``gpu/cuda_ipc.py``, torch's
CUDA runtime). Its inputs are tensors viewing the device memory (``device_input``: no copy; the client
must not rewrite them until the answer, as with Triton), its outputs are copied into it on the
device. A server without a GPU (or without torch) refuses to register one, as a Triton built
without GPUs does (``cuda_shared_memory.py``).
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ferry_client.codec import CodecError, element_count, item_size

from ..errors import ErrorKind, FerryError, InvalidArgument, NotFound
from ..types import InferenceRequest, SharedMemoryInput, SharedMemoryRef
from .limits import Limits

SHM_ROOT = Path("/dev/shm")  # where Linux keeps shm_open objects
REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"
MAX_NAME_BYTES = 255  # NAME_MAX, for keys; region names get the same bound
#: What a key may hold after its leading '/': a portable file name, no '/' and no control bytes.
KEY_CHARACTERS = re.compile(r"[A-Za-z0-9._:@+=~,%-]+")
#: Triton's words (2.73 turns client shared memory off by default too), then how to turn it on.
DISABLED = (
    "Client shared memory is disabled: the operator can enable system shared memory with "
    "--allow-shared-memory (FERRY_ALLOW_SHARED_MEMORY=true)"
)
#: Keys Triton keeps for its Python backend's own regions; refused as Triton refuses them.
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


@dataclass
class Region:
    """A registered window [offset, offset + byte_size) of one shared memory object, open as ``fd``.

    ``users`` counts the requests that name it (``hold``) and the reads and writes in progress. As
    in Triton, unregistering a region in use only marks it ``retired``: it stays listed and usable
    until its last user ends, then it is forgotten and its descriptor closed. So a request never
    loses a region it named mid-way, and never uses a reused descriptor.
    """

    owner: str
    name: str
    key: str
    offset: int
    byte_size: int
    fd: int
    users: int = 0
    retired: bool = field(default=False)
    #: A CUDA region's opened device memory (``gpu.cuda_ipc.CudaWindow``; ``fd`` is then -1).
    window: Any = None
    #: Which registration this is (unique in its registry): an intake's mirror names the one it read.
    generation: int = 0
    #: The object's (st_dev, st_ino): a mirror opens the very object the registry checked.
    object_id: tuple[int, int] = (0, 0)

    def status(self) -> dict[str, Any]:
        if self.window is not None:
            return {"name": self.name, "device_id": self.window.device_id, "byte_size": self.byte_size}
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


class SharedMemoryRegistry:
    """The registered system shared memory regions, by owner and name.

    ``enabled`` False: as Triton with client shared memory off, the status is empty (nothing is
    ever registered) and every other call answers ``DISABLED`` with UNIMPLEMENTED (501), a code
    clients do not retry."""

    def __init__(
        self,
        root: Path = SHM_ROOT,
        *,
        enabled: bool = True,
        owner_uids: frozenset[int] | None = None,
        max_regions: int = 256,
        max_regions_per_owner: int = 64,
        cuda_ipc: Any = None,
    ) -> None:
        """``cuda_ipc``: what opens CUDA regions (``gpu.cuda_ipc.CudaIpc``, its ``open``),
        found at the first CUDA registration when None."""
        self._root = root
        self.enabled = enabled
        self._owner_uids = owner_uids or frozenset({os.geteuid()})
        self._max_regions = max_regions
        self._max_per_owner = max_regions_per_owner
        self._regions: dict[tuple[str, str], Region] = {}
        self._lock = threading.Lock()
        self._cuda_ipc: Any = cuda_ipc  # gpu.cuda_ipc.CudaIpc, found on the first CUDA registration
        self._cuda_checked = cuda_ipc is not None
        self._generations = itertools.count(1)
        #: Told (owner, name, generation) of each system region unregistered: the model process
        #: tells the intakes, whose mirrors of it then close (``intake.region_mirror``).
        self.on_unregistered: Callable[[str, str, int], None] = lambda owner, name, generation: None

    def check_enabled(self) -> None:
        if not self.enabled:
            raise FerryError(DISABLED, ErrorKind.UNIMPLEMENTED)

    # --- registration ---------------------------------------------------------------------------

    def register(
        self,
        owner: str,
        name: str,
        key: str,
        offset: int,
        byte_size: int,
        mirrored: tuple[int, tuple[int, int]] | None = None,
    ) -> None:
        """Open the object ``key`` for ``owner`` and remember the window; it must lie inside the object.
        ``mirrored``: an intake's copy of the model process's registration (``describe``): its
        generation, and the object it must be (else the key now names another one: refused)."""
        self.check_enabled()
        check_region_name(name)
        for label, value in (("offset", offset), ("byte_size", byte_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"shared memory region '{name}': {label} must be a non-negative integer")
        if byte_size == 0:
            raise InvalidArgument(f"shared memory region '{name}': byte_size must be greater than 0")
        path = self._root / _object_name(name, key)
        with self._lock:
            self._check_new(owner, name)
            fd, object_id = self._open(name, key, path, offset + byte_size)
            generation = next(self._generations) if mirrored is None else mirrored[0]
            if mirrored is not None and tuple(mirrored[1]) != object_id:
                os.close(fd)
                raise InvalidArgument(f"shared memory region '{name}': key '{key}' names another object by now")
            self._regions[(owner, name)] = Region(
                owner, name, key, offset, byte_size, fd, generation=generation, object_id=object_id
            )

    def register_cuda(self, owner: str, name: str, raw_handle: object, device_id: int, byte_size: int) -> None:
        """Open a client's CUDA IPC handle on GPU ``device_id`` for ``owner`` (blocking: the first call
        imports torch; run it off the event loop). Refused as Triton built without GPUs refuses it
        where this server has none."""
        self.check_enabled()
        ipc = self._cuda()
        if ipc is None:
            from .cuda_shared_memory import cuda_register_refused

            raise cuda_register_refused(name)
        check_region_name(name)
        for label, value in (("device_id", device_id), ("byte_size", byte_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"CUDA shared memory region '{name}': {label} must be a non-negative integer")
        if byte_size == 0:
            raise InvalidArgument(f"CUDA shared memory region '{name}': byte_size must be greater than 0")
        if not isinstance(raw_handle, bytes):
            raise InvalidArgument(f"CUDA shared memory region '{name}': raw_handle must be the handle's bytes")
        with self._lock:
            self._check_new(owner, name)
            window = ipc.open(name, raw_handle, device_id, byte_size)
            self._regions[(owner, name)] = Region(owner, name, "", 0, byte_size, -1, window=window)

    def _cuda(self) -> Any:
        """The CUDA IPC opener, or None where torch sees no GPU (looked up once)."""
        if not self._cuda_checked:
            try:
                from ..gpu.cuda_ipc import open_cuda_ipc
            except ImportError:
                self._cuda_ipc = None
            else:
                self._cuda_ipc = open_cuda_ipc()
            self._cuda_checked = True
        return self._cuda_ipc

    def _check_new(self, owner: str, name: str) -> None:
        """A name is free for ``owner`` in both kinds (Triton: one manager), within the caps (the lock is held)."""
        if (owner, name) in self._regions:
            raise FerryError(
                f"shared memory region '{name}' already in manager; unregister it first",
                ErrorKind.ALREADY_EXISTS,
            )
        self._check_room(owner, name)

    def _check_room(self, owner: str, name: str) -> None:
        held = sum(1 for region_owner, _ in self._regions if region_owner == owner)
        if held >= self._max_per_owner:
            raise FerryError(
                f"cannot register shared memory region '{name}': this client already holds {held} regions, the "
                f"limit per client (--shared-memory-max-regions-per-client); unregister some first",
                ErrorKind.RESOURCE_EXHAUSTED,
            )
        if len(self._regions) >= self._max_regions:
            raise FerryError(
                f"cannot register shared memory region '{name}': the server holds {len(self._regions)} regions, "
                "its limit (--shared-memory-max-regions); try again later",
                ErrorKind.RESOURCE_EXHAUSTED,
            )

    def _open(self, name: str, key: str, path: Path, needed: int) -> tuple[int, tuple[int, int]]:
        """A descriptor of the object at ``path`` and the object's identity, after every check a
        hostile key could defeat."""
        where = f"shared memory region '{name}': key '{key}'"
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            reason = "it is a symbolic link, which is never followed" if exc.errno == errno.ELOOP else exc.strerror
            raise InvalidArgument(f"Unable to open shared memory region: '{key}' ({reason})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidArgument(f"{where} does not name a shared memory object (not a regular object)")
            if info.st_uid not in self._owner_uids:
                raise InvalidArgument(
                    f"{where}: the object is owned by a user this server does not accept "
                    "(--shared-memory-owner-uid; default: the server's own user)"
                )
            if needed > info.st_size:
                raise InvalidArgument(
                    f"failed to register shared memory region '{name}': invalid args: offset + byte_size "
                    f"({needed}) exceeds the {info.st_size} bytes of shared memory key '{key}'"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd, (info.st_dev, info.st_ino)

    def unregister(self, owner: str, name: str = "", cuda: bool = False) -> None:
        """Forget one of ``owner``'s regions (or all of them, when ``name`` is empty). Unknown names are
        not an error, as in Triton; another owner's region is unknown to this one and stays registered.
        A region in use is forgotten when its last request ends (Triton's words: unregistered after
        in-flight requests complete). ``cuda``: CUDA regions, else system ones; the other kind stays."""
        self.check_enabled()
        if name:
            check_region_name(name)
        with self._lock:
            keys = [k for k in self._regions if k[0] == owner] if not name else [(owner, name)]
            found = [self._regions[k] for k in keys if k in self._regions]
            retired = [r for r in found if (r.window is not None) == cuda and not r.retired]
            for region in retired:
                region.retired = True
                if region.users == 0:
                    self._forget(region)
        for region in retired:
            if region.window is None:
                self.on_unregistered(owner, region.name, region.generation)

    def _forget(self, region: Region) -> None:
        """Drop a retired region nobody uses and close its descriptor (the lock is held)."""
        if self._regions.get((region.owner, region.name)) is region:
            del self._regions[(region.owner, region.name)]
        _close(region)

    def hold(self, owner: str, names: Iterable[str]) -> Callable[[], None]:
        """Keep ``owner``'s regions ``names`` (those registered) for a request from its start to its
        end, so an unregister meanwhile waits for it; returns the function that ends the hold."""
        with self._lock:
            held = [region for name in set(names) if (region := self._regions.get((owner, name))) is not None]
            for region in held:
                region.users += 1

        def release() -> None:
            with self._lock:
                for region in held:
                    self._release(region)

        return release

    def _release(self, region: Region) -> None:
        """One user of ``region`` is done (the lock is held)."""
        region.users -= 1
        if region.retired and region.users == 0:
            self._forget(region)

    def status(self, owner: str, name: str = "", cuda: bool = False) -> list[dict[str, Any]]:
        """Every region of ``owner`` of one kind (``cuda``, else system), or one of them (NOT_FOUND when
        ``owner`` has none of that name and kind)."""
        if name:
            check_region_name(name)
        with self._lock:
            if not name:
                mine = (r for (o, _), r in self._regions.items() if o == owner and (r.window is not None) == cuda)
                return [r.status() for r in sorted(mine, key=lambda r: r.name)]
            region = self._regions.get((owner, name))
        if region is None or (region.window is not None) != cuda:
            if cuda:
                raise NotFound(f"unable to find cuda shared memory region '{name}'")
            raise NotFound(f"Unable to find system shared memory region: '{name}'")
        return [region.status()]

    def count(self) -> int:
        with self._lock:
            return len(self._regions)

    def describe(self, owner: str, name: str) -> dict[str, Any]:
        """What an intake needs to mirror ``owner``'s system region ``name`` (``register(...,
        mirrored=...)``): NOT_FOUND when there is none in use (unknown, CUDA, or unregistered)."""
        self.check_enabled()
        check_region_name(name)
        with self._lock:
            region = self._regions.get((owner, name))
            if region is None or region.window is not None or region.retired:
                raise NotFound(f"Unable to find system shared memory region: '{name}'")
            return {
                "key": region.key,
                "offset": region.offset,
                "byte_size": region.byte_size,
                "generation": region.generation,
                "object": list(region.object_id),
            }

    def current(self, owner: str, generations: Mapping[str, int]) -> bool:
        """Whether each of ``owner``'s regions named is still the registration of that generation
        (an intake read it through its mirror; an unregister since then makes this False)."""
        with self._lock:
            for name, generation in generations.items():
                region = self._regions.get((owner, name))
                if region is None or region.retired or region.generation != generation:
                    return False
        return True

    # --- use by requests ------------------------------------------------------------------------

    def read(self, owner: str, ref: SharedMemoryRef, tensor: str) -> memoryview:
        """A copy of an input tensor's bytes (checked against the region's bounds and the object's size)."""
        with self._lease(owner, ref, tensor) as region:
            start = region.offset + ref.offset
            if region.window is not None:
                return region.window.read(start, ref.byte_size)
            view = np.empty(ref.byte_size, np.uint8).data  # numpy: aligned for any element type
            _read_into(region, view, start, tensor)
        return view

    def device_input(self, owner: str, ref: SharedMemoryRef, tensor: str, datatype: str, shape: tuple[int, ...]) -> Any:
        """An input in a CUDA region as a torch tensor of ``datatype`` and ``shape`` viewing the
        client's device memory (no copy: the request's ``hold`` keeps the region registered until it
        ends, and the memory stays mapped while any view of it lives); None for a system region or
        BYTES, which ``read`` copies out. Checked as ``read`` checks."""
        with self._lease(owner, ref, tensor) as region:
            if region.window is None:
                return None
            return region.window.tensor(region.offset + ref.offset, ref.byte_size, datatype, shape)

    def is_cuda(self, owner: str, name: str) -> bool:
        """Whether ``owner``'s region ``name`` is a CUDA one (False when there is none of that name)."""
        with self._lock:
            region = self._regions.get((owner, name))
        return region is not None and region.window is not None

    def read_into(self, owner: str, ref: SharedMemoryRef, tensor: str, target: memoryview) -> None:
        """An input tensor's bytes copied into ``target`` (``ref.byte_size`` bytes of memory the
        caller owns: an intake's arena block), checked as ``read`` checks them; system regions only."""
        with self._lease(owner, ref, tensor) as region:
            if region.window is not None:
                raise InvalidArgument(f"tensor '{tensor}': shared memory region '{ref.region}' is a CUDA region")
            _read_into(region, target[: ref.byte_size], region.offset + ref.offset, tensor)

    def write(self, owner: str, ref: SharedMemoryRef, tensor: str, data: Any) -> int:
        """Copy an output tensor into its region; returns the bytes written. ``data``: its bytes, or
        a torch tensor an engine left on its device (``InferenceRequest.device_outputs``: copied into
        a CUDA region on the device; brought to host memory for a system one)."""
        on_device = not isinstance(data, bytes | bytearray | memoryview)
        size = data.nbytes if on_device else memoryview(data).nbytes
        if size > ref.byte_size:
            raise InvalidArgument(
                f"output '{tensor}' needs {size} bytes but its shared memory byte size is {ref.byte_size}"
            )
        with self._lease(owner, ref, tensor) as region:
            start = region.offset + ref.offset
            if region.window is not None:
                region.window.write(start, data if on_device else memoryview(data).cast("B"))
                return size
            if on_device:
                from ..gpu.device_tensors import host_array

                data = host_array(data)
            source = memoryview(data).cast("B")
            if os.fstat(region.fd).st_size < start + size:  # writing on would grow the client's object
                raise _shrunk(region, tensor, start + size)
            done = 0
            while done < size:
                done += os.pwrite(region.fd, source[done:], start + done)
        return size

    @contextmanager
    def _lease(self, owner: str, ref: SharedMemoryRef, tensor: str) -> Iterator[Region]:
        """The region ``ref`` names, kept open until the block ends."""
        self.check_enabled()
        with self._lock:
            region = self._regions.get((owner, ref.region))
            if region is not None:
                region.users += 1
        if region is None:
            raise InvalidArgument(f"Unable to find shared memory region: '{ref.region}' (tensor '{tensor}')")
        try:
            _check_bounds(region, ref, tensor)
            yield region
        finally:
            with self._lock:
                self._release(region)

    def close(self) -> None:
        with self._lock:
            regions = list(self._regions.values())
            self._regions.clear()
            for region in regions:
                region.retired = True
                if region.users == 0:
                    _close(region)


def _read_into(region: Region, view: memoryview, start: int, tensor: str) -> None:
    """Fill ``view`` from ``region``'s object at ``start`` through its descriptor (never a mapping:
    see the module's docstring); an object shrunk below the window is the caller's error."""
    done = 0
    while done < view.nbytes:
        got = os.preadv(region.fd, [view[done:]], start + done)
        if got <= 0:
            raise _shrunk(region, tensor, start + view.nbytes)
        done += got


def _close(region: Region) -> None:
    """Give back what a region holds: its descriptor, or its opened CUDA memory."""
    if region.window is not None:
        region.window.close()
    else:
        os.close(region.fd)


#: The largest size Triton's (size_t) arithmetic holds: an offset + byte size past it is refused.
SIZE_MAX = 2**64 - 1


def _check_bounds(region: Region, ref: SharedMemoryRef, tensor: str) -> None:
    """A request's window must lie inside the registered one (Triton's checks, in its order)."""
    where = f"shared memory region: '{ref.region}' (tensor '{tensor}', region of {region.byte_size} bytes)"
    if ref.offset >= region.byte_size:
        raise InvalidArgument(f"Invalid offset for {where}")
    if ref.offset + ref.byte_size > SIZE_MAX:
        raise InvalidArgument(
            f"Integer overflow detected: byte_size ({ref.byte_size}) + offset ({ref.offset}) exceeds maximum "
            f"value ({SIZE_MAX}) for region '{ref.region}'"
        )
    if ref.offset + ref.byte_size > region.byte_size:
        raise InvalidArgument(f"Invalid offset + byte size for {where}")


def _shrunk(region: Region, tensor: str, end: int) -> InvalidArgument:
    return InvalidArgument(
        f"tensor '{tensor}': shared memory region '{region.name}' needs {end} bytes of key '{region.key}', "
        "but the object has been shrunk below that; register it again at its new size"
    )


def check_region_name(name: Any) -> None:
    """A region name: 1 to 255 bytes of printable characters, no '/' (it is a REST path segment)."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument("a shared memory region needs a name")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES or not name.isprintable() or "/" in name:
        raise InvalidArgument(
            f"shared memory region name {_shown(name)} is not valid: at most {MAX_NAME_BYTES} bytes of "
            "printable characters, without '/'"
        )


def _object_name(name: str, key: str) -> str:
    """The file name of a shm_open key: leading slashes dropped (as glibc does), then a plain name."""
    stripped = key.lstrip("/") if isinstance(key, str) else ""
    if stripped.startswith(RESERVED_KEY_PREFIX):
        raise InvalidArgument(
            f"cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved "
            f"prefix '{RESERVED_KEY_PREFIX}'"
        )
    if (
        not stripped
        or len(stripped) > MAX_NAME_BYTES
        or stripped in (".", "..")
        or KEY_CHARACTERS.fullmatch(stripped) is None
    ):
        raise InvalidArgument(
            f"cannot register shared memory region '{name}' - invalid shm key {_shown(key)}: a shared memory "
            f"object name is '/name', at most {MAX_NAME_BYTES} letters, digits and ._:@+=~,%- characters, "
            "no other '/'"
        )
    return stripped


def _shown(text: Any) -> str:
    """A caller's string for an error message: quoted and escaped (NUL and control bytes visible), cut short."""
    shown = ascii(text) if isinstance(text, str) else repr(type(text).__name__)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def tensor_ref(tensor: str, parameters: Mapping[str, Any]) -> SharedMemoryRef | None:
    """The shared memory location a tensor's parameters name, or None when they name none."""
    if REGION not in parameters:
        stray = [key for key in (OFFSET, BYTE_SIZE) if key in parameters]
        if stray:
            raise InvalidArgument(f"tensor '{tensor}': {stray[0]} given without {REGION}")
        return None
    region = parameters[REGION]
    if not isinstance(region, str) or not region:
        raise InvalidArgument(f"tensor '{tensor}': {REGION} must be a region name")
    check_region_name(region)
    if BYTE_SIZE not in parameters:
        raise InvalidArgument(f"tensor '{tensor}': {REGION} needs {BYTE_SIZE}")
    values = {key: parameters.get(key, 0) for key in (OFFSET, BYTE_SIZE)}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"tensor '{tensor}': {key} must be a non-negative integer, got {value!r}")
    return SharedMemoryRef(region, values[OFFSET], values[BYTE_SIZE])


def check_input_size(limits: Limits, model: str, name: str, shared: SharedMemoryInput) -> None:
    """An input in shared memory: its declared shape within the limits, its byte size the one that
    shape needs (refused before anything is read)."""
    limits.check_tensor(name, shared.datatype, shared.shape)
    try:
        size = item_size(shared.datatype)
        expected = None if size is None else element_count(name, shared.shape) * size
    except CodecError as exc:
        raise InvalidArgument(str(exc)) from None
    if expected is not None and expected != shared.ref.byte_size:
        raise InvalidArgument(
            f"input byte size mismatch for input '{name}' for model '{model}'. Expected "
            f"{expected}, got {shared.ref.byte_size} (shared memory, {shared.datatype} "
            f"shape {list(shared.shape)})"
        )


def shared_regions(request: InferenceRequest) -> set[str]:
    """The regions a request reads inputs from or writes outputs to."""
    names = {shared.ref.region for shared in request.shared_memory_inputs.values()}
    names.update(o.shared_memory.region for o in request.outputs or () if o.shared_memory is not None)
    return names


def ref_parameters(ref: SharedMemoryRef, written: int) -> dict[str, Any]:
    """The parameters of an output written to shared memory, as Triton reports them."""
    parameters: dict[str, Any] = {REGION: ref.region, BYTE_SIZE: written}
    if ref.offset:
        parameters[OFFSET] = ref.offset
    return parameters
