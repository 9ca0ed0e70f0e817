"""System shared memory regions: Triton's ``systemsharedmemory`` extension, protocol-neutral.

A client creates a POSIX shared memory object (``shm_open`` key), registers a window of it under a
name, then sends inference requests whose tensors say ``shared_memory_region`` / ``_offset`` /
``_byte_size`` instead of carrying their bytes. Inputs are read as views of the mapping (no copy)
and outputs are written into it. The REST and gRPC adapters only translate to these calls.

Unregistering removes the name at once; requests that already resolved a region keep its mapping
until they finish (the mapping closes when its last view is released), so a concurrent unregister
never invalidates memory under a running request.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ErrorKind, FerryError, InvalidArgument, NotFound
from ..types import SharedMemoryRef

SHM_ROOT = Path("/dev/shm")  # where Linux keeps shm_open objects
REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"


@dataclass(frozen=True)
class Region:
    """A registered window [offset, offset + byte_size) of one shared memory object."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


class SharedMemoryRegistry:
    """The server's registered system shared memory regions, by name."""

    def __init__(self, root: Path = SHM_ROOT) -> None:
        self._root = root
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the object ``key``; the window must lie inside it."""
        if not name:
            raise InvalidArgument("a shared memory region needs a name")
        for field, value in (("offset", offset), ("byte_size", byte_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"shared memory region '{name}': {field} must be a non-negative integer")
        if byte_size == 0:
            raise InvalidArgument(f"shared memory region '{name}': byte_size must be greater than 0")
        with self._lock:
            if name in self._regions:
                raise FerryError(
                    f"shared memory region '{name}' is already registered; unregister it first",
                    ErrorKind.ALREADY_EXISTS,
                )
            mapping = self._map(name, key, offset + byte_size)
            self._regions[name] = Region(name, key, offset, byte_size, mapping)

    def _map(self, name: str, key: str, needed: int) -> mmap.mmap:
        path = self._root / _object_name(name, key)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise InvalidArgument(
                f"shared memory region '{name}': cannot open shared memory key '{key}': {exc.strerror}"
            ) from None
        try:
            size = os.fstat(fd).st_size
            if needed > size:
                raise InvalidArgument(
                    f"shared memory region '{name}': offset + byte_size ({needed}) exceeds the "
                    f"{size} bytes of shared memory key '{key}'"
                )
            return mmap.mmap(fd, needed)
        finally:
            os.close(fd)

    def unregister(self, name: str = "") -> None:
        """Forget one region (or all, when ``name`` is empty); unknown names are not an error, as in Triton."""
        with self._lock:
            removed = list(self._regions.values()) if not name else [self._regions.pop(name, None)]
            if not name:
                self._regions.clear()
        for region in removed:
            if region is not None:
                _close_when_unused(region.mapping)

    def status(self, name: str = "") -> list[dict[str, Any]]:
        """Every region's status, or one region's (NOT_FOUND when it is not registered)."""
        with self._lock:
            if not name:
                return [r.status() for r in sorted(self._regions.values(), key=lambda r: r.name)]
            return [self._get(name).status()]

    def _get(self, name: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise NotFound(f"unable to find system shared memory region '{name}'")
        return region

    def view(self, ref: SharedMemoryRef, tensor: str) -> memoryview:
        """The bytes of an input tensor, as a view of the region (checked against its bounds)."""
        region = self._window(ref, tensor)
        start = region.offset + ref.offset
        return memoryview(region.mapping)[start : start + ref.byte_size]

    def write(self, ref: SharedMemoryRef, tensor: str, data: bytes | memoryview) -> int:
        """Copy an output tensor into its region; returns the bytes written."""
        region = self._window(ref, tensor)
        size = memoryview(data).nbytes
        if size > ref.byte_size:
            raise InvalidArgument(
                f"output '{tensor}' needs {size} bytes but its shared memory byte size is {ref.byte_size}"
            )
        start = region.offset + ref.offset
        region.mapping[start : start + size] = data
        return size

    def _window(self, ref: SharedMemoryRef, tensor: str) -> Region:
        with self._lock:
            region = self._regions.get(ref.region)
        if region is None:
            raise InvalidArgument(f"tensor '{tensor}': unable to find system shared memory region '{ref.region}'")
        if ref.offset + ref.byte_size > region.byte_size:
            raise InvalidArgument(
                f"tensor '{tensor}': shared memory offset {ref.offset} + byte size {ref.byte_size} is outside "
                f"region '{ref.region}' of {region.byte_size} bytes"
            )
        return region

    def close(self) -> None:
        self.unregister()


def _object_name(name: str, key: str) -> str:
    """The file name of a shm_open key: leading slashes dropped (as glibc does), then no other '/'."""
    stripped = key.lstrip("/")
    if not stripped or "/" in stripped or stripped in (".", ".."):
        raise InvalidArgument(
            f"shared memory region '{name}': key '{key}' is not a shared memory object name ('/name', no other '/')"
        )
    return stripped


def _close_when_unused(mapping: mmap.mmap) -> None:
    """Close now unless a running request still holds a view; then the last view's release closes it."""
    with contextlib.suppress(BufferError):
        mapping.close()


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
    if BYTE_SIZE not in parameters:
        raise InvalidArgument(f"tensor '{tensor}': {REGION} needs {BYTE_SIZE}")
    values = {key: parameters.get(key, 0) for key in (OFFSET, BYTE_SIZE)}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"tensor '{tensor}': {key} must be a non-negative integer, got {value!r}")
    return SharedMemoryRef(region, values[OFFSET], values[BYTE_SIZE])


def ref_parameters(ref: SharedMemoryRef, written: int) -> dict[str, Any]:
    """The parameters of an output written to shared memory, as Triton reports them."""
    parameters: dict[str, Any] = {REGION: ref.region, BYTE_SIZE: written}
    if ref.offset:
        parameters[OFFSET] = ref.offset
    return parameters
