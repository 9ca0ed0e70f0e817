"""The few CUDA runtime calls the TensorRT backend needs, through NVIDIA's cuda-python bindings.

Imported only when a TensorRT model loads: the default (CPU) install has no GPU libraries.
cuda-python comes with the ``ferry[tensorrt]`` extra. Every call's status is checked, and a
failure raises ``CudaError`` naming the call.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from ..cli_errors import install_hint
from ..errors import FerryError, ModelLoadError

INSTALL_HINT = f"install the TensorRT extra: {install_hint('tensorrt')}"


class CudaError(FerryError):
    """A CUDA runtime call failed."""


def import_cudart() -> ModuleType:
    """cuda-python's runtime module (``cuda.bindings.runtime``; ``cuda.cudart`` before 12.6)."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        pass
    else:
        return runtime
    try:
        from cuda import cudart
    except ImportError:
        raise ModelLoadError(f"the CUDA runtime bindings (cuda-python) are not installed; {INSTALL_HINT}") from None
    return cudart


def check(result: Any, call: str) -> Any:
    """Unpack cuda-python's ``(status, value...)`` tuples, raising on a non-success status."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise CudaError(f"{call} failed: {status!r}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def device_count(cudart: ModuleType) -> int:
    """GPUs visible to this process (0 when the driver is missing or no device is present)."""
    status, count = cudart.cudaGetDeviceCount()
    return int(count) if int(status) == 0 else 0


def compute_capability(cudart: ModuleType, device: int) -> str:
    """ "major.minor" of a device, the key of ``cc_model_filenames`` (e.g. "9.0" for H100/H200)."""
    attr = cudart.cudaDeviceAttr
    major, minor = (
        check(cudart.cudaDeviceGetAttribute(which, device), "cudaDeviceGetAttribute")
        for which in (attr.cudaDevAttrComputeCapabilityMajor, attr.cudaDevAttrComputeCapabilityMinor)
    )
    return f"{major}.{minor}"


class DeviceBuffer:
    """One device allocation of a fixed size, reused for every request."""

    def __init__(self, cudart: ModuleType, nbytes: int) -> None:
        self._cudart = cudart
        self.nbytes = max(1, int(nbytes))
        self.ptr = int(check(cudart.cudaMalloc(self.nbytes), "cudaMalloc"))

    def upload(self, array: np.ndarray, stream: Any) -> None:
        if array.nbytes > self.nbytes:
            raise CudaError(f"{array.nbytes} bytes do not fit a {self.nbytes}-byte device buffer")
        kind = self._cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        check(self._cudart.cudaMemcpyAsync(self.ptr, array.ctypes.data, array.nbytes, kind, stream), "cudaMemcpyAsync")

    def download(self, array: np.ndarray, stream: Any) -> None:
        kind = self._cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        check(self._cudart.cudaMemcpyAsync(array.ctypes.data, self.ptr, array.nbytes, kind, stream), "cudaMemcpyAsync")

    def free(self) -> None:
        if self.ptr:
            self._cudart.cudaFree(self.ptr)
            self.ptr = 0
