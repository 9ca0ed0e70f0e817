"""A client's CUDA allocation opened from its ``cudaIpcMemHandle_t`` (Triton's CUDA shared memory).

``tritonclient.utils.cuda_shared_memory`` registers a region as the 64 raw bytes of the handle, the
device id and a byte size. The server opens the handle with ``cudaIpcOpenMemHandle`` from the CUDA
runtime torch has loaded (the same runtime, so torch's current device applies to the call), and
reaches the window through a torch tensor over that device memory (``__cuda_array_interface__``):
an input is a view of it (no copy), an output is copied into it on the device. Torch keeps the
object behind ``__cuda_array_interface__`` alive while any view of its memory lives, so the handle
is closed only when the last view is gone (a batch still reading a region whose request was
cancelled and unregistered never reads unmapped memory). Imported only when a CUDA region is
registered: a server without torch or without a GPU refuses the registration as before
(``api/cuda_shared_memory.py``).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from pathlib import Path

import numpy as np
import torch

from ..errors import InvalidArgument
from .device_tensors import TORCH_DTYPES

#: sizeof(cudaIpcMemHandle_t)
HANDLE_BYTES = 64
_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


def _loaded_cudart() -> ctypes.CDLL:
    """The libcudart this process loaded with torch (found in its memory map)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if "/libcudart" in path and ".so" in path:
            return ctypes.CDLL(path)
    return ctypes.CDLL("libcudart.so")


class _DeviceMemory:
    """Exposes (pointer, byte size) on a device to torch as a uint8 vector."""

    def __init__(self, pointer: int, byte_size: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (byte_size,),
            "typestr": "|u1",
            "data": (pointer, False),
            "version": 3,
        }


class CudaIpc:
    """Opens and closes IPC handles on this process's GPUs."""

    def __init__(self) -> None:
        self._cudart = _loaded_cudart()
        self._cudart.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), _Handle, ctypes.c_uint]
        self._cudart.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        self._cudart.cudaGetErrorString.restype = ctypes.c_char_p
        self._driver = ctypes.CDLL("libcuda.so.1")
        self._lock = threading.RLock()  # a handle may close (its last view freed) on a thread that holds it

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def open(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> CudaWindow:
        if len(raw_handle) != HANDLE_BYTES:
            raise InvalidArgument(
                f"cannot register CUDA shared memory region '{name}': raw_handle must be the {HANDLE_BYTES} bytes "
                f"of a cudaIpcMemHandle_t, got {len(raw_handle)}"
            )
        if not 0 <= device_id < self.device_count():
            raise InvalidArgument(
                f"cannot register CUDA shared memory region '{name}': device_id {device_id} is not a GPU of "
                f"this server (it has {self.device_count()})"
            )
        pointer, allocated = ctypes.c_void_p(), 0
        with self._lock, torch.cuda.device(device_id):
            status = self._cudart.cudaIpcOpenMemHandle(
                ctypes.byref(pointer), _Handle(raw_handle), _LAZY_ENABLE_PEER_ACCESS
            )
            if status == 0 and pointer.value:
                allocated = self._allocation_end(pointer.value)
        if status != 0 or not pointer.value:
            reason = self._cudart.cudaGetErrorString(status).decode(errors="replace")
            raise InvalidArgument(f"failed to open CUDA IPC handle of region '{name}': {reason}")
        if pointer.value + byte_size > allocated:
            self.close(pointer.value, device_id)
            raise InvalidArgument(
                f"failed to register CUDA shared memory region '{name}': invalid args: byte_size ({byte_size}) "
                f"exceeds the {allocated - pointer.value} bytes of the client's allocation"
            )
        memory = _DeviceMemory(pointer.value, byte_size)
        weakref.finalize(memory, self.close, pointer.value, device_id)  # once no tensor views it
        return CudaWindow(torch.as_tensor(memory, device=torch.device("cuda", device_id)), device_id)

    def _allocation_end(self, pointer: int) -> int:
        """Where the allocation ``pointer`` lies in ends (the driver's cuMemGetAddressRange), so a byte
        size past the client's memory is refused, not read out of bounds on the device."""
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        status = self._driver.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer))
        return base.value + size.value if status == 0 else 0

    def close(self, pointer: int, device_id: int) -> None:
        with self._lock, torch.cuda.device(device_id):
            self._cudart.cudaIpcCloseMemHandle(ctypes.c_void_p(pointer))


class CudaWindow:
    """An opened region: ``byte_size`` bytes of device memory as a uint8 tensor. Inputs are views of
    it, outputs are copied into it on the device; what it needs of the memory is a torch tensor, so
    a CPU tensor stands in for the IPC-opened one in tests (torch's CPU device)."""

    def __init__(self, tensor: torch.Tensor, device_id: int) -> None:
        self._tensor = tensor
        self.device_id = device_id

    def tensor(self, start: int, size: int, datatype: str, shape: tuple[int, ...]) -> torch.Tensor | None:
        """The bytes [start, start + size) as a ``datatype`` tensor of ``shape`` viewing the region
        (no copy; copied on the device only where ``start`` is not a multiple of the element size);
        None for a datatype with no tensor type (BYTES), which ``read`` copies out."""
        dtype = TORCH_DTYPES.get(datatype)
        if dtype is None:
            return None
        raw = self._tensor[start : start + size]
        if start % dtype.itemsize:
            raw = raw.clone()
        return raw.view(dtype).reshape(shape)

    def read(self, start: int, size: int) -> memoryview:
        host = self._tensor[start : start + size].to("cpu")  # synchronous: the bytes are there on return
        return memoryview(host.numpy()).cast("B")

    def write(self, start: int, data: torch.Tensor | bytes | memoryview) -> None:
        """Copy an output into the region: a tensor (on the device: a device-to-device copy) or host
        bytes, on the current stream, which is then synchronised (the client reads the region once
        the answer arrives), not the whole device."""
        if isinstance(data, torch.Tensor):
            source = data.contiguous().reshape(-1).view(torch.uint8)
        else:
            source = torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy())
        self._tensor[start : start + source.numel()].copy_(source)
        if self._tensor.is_cuda:
            torch.cuda.current_stream(self._tensor.device).synchronize()

    def close(self) -> None:
        """Let the memory go: an IPC handle is closed once no view of it is left (``CudaIpc.open``)."""
        del self._tensor


def open_cuda_ipc() -> CudaIpc | None:
    """The opener where torch sees a GPU; None on a server without one (or without torch)."""
    try:
        if not torch.cuda.is_available():
            return None
        return CudaIpc()
    except OSError:  # no CUDA runtime library to open
        return None
