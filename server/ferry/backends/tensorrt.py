"""TensorRT backend for ``.plan`` engines, with the TensorRT 10 tensor-name API.

Each instance owns an execution context, one CUDA stream, and device buffers sized for the
largest shapes of the engine's optimization profiles, allocated once at load. A request sets the
input shapes (``set_input_shape``), binds buffers by tensor name (``set_tensor_address``) and runs
``execute_async_v3`` on the instance's stream. TensorRT and cuda-python are imported only here,
when a ``tensorrt_plan`` model loads; what fails (no package, no GPU, an engine from another
TensorRT version or GPU generation) becomes a load error that says which.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from ..errors import FerryError, InvalidArgument, ModelLoadError
from .base import Backend, Instance, InstanceSpec, ModelIO, TensorInfo
from .batch_profile import ShapeRange, check_config_against_profiles, choose_profile
from .cuda_runtime import INSTALL_HINT, DeviceBuffer, check, compute_capability, device_count, import_cudart

# TensorRT DataType names -> V2 datatypes (BF16 has no numpy type: carried as raw uint16 patterns).
_DATATYPE_BY_TRT_NAME = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    "BF16": "BF16",
    "INT8": "INT8",
    "UINT8": "UINT8",
    "INT32": "INT32",
    "INT64": "INT64",
    "BOOL": "BOOL",
}
_NUMPY_BY_DATATYPE = {
    "FP32": np.float32,
    "FP16": np.float16,
    "BF16": np.uint16,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "INT32": np.int32,
    "INT64": np.int64,
    "BOOL": np.bool_,
}


def import_tensorrt() -> ModuleType:
    try:
        import tensorrt as trt
    except ImportError:
        raise ModelLoadError(f"platform tensorrt_plan needs the tensorrt package; {INSTALL_HINT}") from None
    major = int(trt.__version__.split(".")[0])
    if major < 10:
        raise ModelLoadError(f"TensorRT {trt.__version__} is too old: Ferry uses the TensorRT 10 tensor API")
    return trt


def engine_file_for(model_file: Path, config: mc.ModelConfig, capability: str) -> Path:
    """The engine for this GPU: ``cc_model_filenames[capability]``, else the default model file."""
    chosen = config.cc_model_filenames.get(capability)
    if chosen:
        path = model_file.parent / chosen
        if not path.is_file():
            raise ModelLoadError(f"cc_model_filenames['{capability}'] names {path}, which does not exist")
        return path
    if model_file.is_file():
        return model_file
    known = ", ".join(f"{cc}: {name}" for cc, name in sorted(config.cc_model_filenames.items())) or "none"
    raise ModelLoadError(
        f"no engine for this GPU (compute capability {capability}): {model_file.name} does not exist and "
        f"cc_model_filenames has {known}; build one here with `ferry optimize --engine tensorrt`"
    )


def datatype_of(trt_dtype: Any) -> str | None:
    return _DATATYPE_BY_TRT_NAME.get(getattr(trt_dtype, "name", str(trt_dtype)).upper())


def collecting_logger(trt: Any) -> Any:  # the tensorrt module (untyped: its classes are bases here)
    """A trt.ILogger that keeps TensorRT's error messages (``.errors``), so load errors can quote them."""

    class Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if severity in (trt.ILogger.Severity.ERROR, trt.ILogger.Severity.INTERNAL_ERROR):
                self.errors.append(msg)

    return Logger()


def read_profiles(engine: Any, inputs: list[str]) -> list[dict[str, ShapeRange]]:
    """Each optimization profile's min/opt/max shape for every input (none for a static engine)."""
    if all(d >= 0 for name in inputs for d in engine.get_tensor_shape(name)):
        return []
    profiles = []
    for index in range(engine.num_optimization_profiles):
        profile = {}
        for name in inputs:
            low, opt, high = engine.get_tensor_profile_shape(name, index)
            profile[name] = ShapeRange(tuple(low), tuple(opt), tuple(high))
        profiles.append(profile)
    return profiles


class TensorRTInstance(Instance):
    """One execution context of a deserialized engine on one GPU."""

    def __init__(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> None:
        if spec.kind != "GPU":
            raise ModelLoadError(f"instance '{spec.name}': TensorRT engines run only on GPUs; use KIND_GPU")
        trt, cudart = import_tensorrt(), import_cudart()
        if device_count(cudart) <= spec.device_id:
            raise ModelLoadError(f"instance '{spec.name}': no CUDA GPU {spec.device_id} visible to this process")
        self.spec = spec
        self.device = f"cuda:{spec.device_id}"
        self._trt, self._cudart = trt, cudart
        self._lock = threading.Lock()
        check(cudart.cudaSetDevice(spec.device_id), "cudaSetDevice")
        capability = compute_capability(cudart, spec.device_id)
        engine_path = engine_file_for(model_file, config, capability)
        logger = collecting_logger(trt)
        self._runtime = trt.Runtime(logger)
        self.engine = self._runtime.deserialize_cuda_engine(engine_path.read_bytes())
        if self.engine is None:
            detail = "; ".join(logger.errors) or "no detail from TensorRT"
            raise ModelLoadError(
                f"TensorRT {trt.__version__} cannot load {engine_path} on a compute capability {capability} GPU "
                f"(engines run only with the TensorRT version and GPU generation that built them): {detail}"
            )
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self._inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self._outputs = [n for n in names if n not in self._inputs]
        self._types = {n: datatype_of(self.engine.get_tensor_dtype(n)) for n in names}
        self.io = ModelIO(
            inputs=[self._info(n) for n in self._inputs],
            outputs=[self._info(n) for n in self._outputs],
        )
        self.profiles = read_profiles(self.engine, self._inputs)
        check_config_against_profiles(config, self.profiles, str(engine_path))
        self.context = self.engine.create_execution_context()
        self._stream = check(cudart.cudaStreamCreate(), "cudaStreamCreate")
        self._profile = 0
        self._buffers = self._allocate()

    def _info(self, name: str) -> TensorInfo:
        shape = tuple(d if d >= 0 else None for d in self.engine.get_tensor_shape(name))
        dtype = self.engine.get_tensor_dtype(name)
        return TensorInfo(name, self._types[name], shape, engine_type=getattr(dtype, "name", str(dtype)))

    def _allocate(self) -> dict[str, DeviceBuffer]:
        """Buffers for the largest shapes any profile allows (outputs: as TensorRT infers them)."""
        sizes: dict[str, int] = {}
        for index, profile in enumerate(self.profiles or [{}]):
            if self.profiles:
                self._set_profile(index)
            for name in self._inputs:
                shape = profile[name].max if name in profile else tuple(self.engine.get_tensor_shape(name))
                self.context.set_input_shape(name, shape)
                sizes[name] = max(sizes.get(name, 0), self._nbytes(name, shape))
            for name in self._outputs:
                shape = tuple(self.context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise ModelLoadError(
                        f"output '{name}' has a data-dependent shape {list(shape)}, which this backend does not serve"
                    )
                sizes[name] = max(sizes.get(name, 0), self._nbytes(name, shape))
        if self.profiles:
            self._set_profile(0)
        return {name: DeviceBuffer(self._cudart, size) for name, size in sizes.items()}

    def _nbytes(self, name: str, shape: tuple[int, ...]) -> int:
        dtype = _NUMPY_BY_DATATYPE.get(self._types[name] or "")
        if dtype is None:
            raise ModelLoadError(f"tensor '{name}' has a type the V2 protocol cannot carry")
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize

    def _set_profile(self, index: int) -> None:
        if not self.context.set_optimization_profile_async(index, int(self._stream)):
            raise FerryError(f"TensorRT refused optimization profile {index}")
        self._profile = index

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        with self._lock:
            return self._compute(inputs, outputs)

    def _compute(self, inputs: Mapping[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        if self.profiles:
            index = choose_profile(self.profiles, {name: a.shape for name, a in inputs.items()})
            if index != self._profile:
                self._set_profile(index)
        for name in self._inputs:
            if name not in inputs:
                raise InvalidArgument(f"input '{name}' is required by the engine")
            dtype = _NUMPY_BY_DATATYPE[self._types[name] or "FP32"]
            array: np.ndarray = np.ascontiguousarray(inputs[name], dtype=dtype)
            if not self.context.set_input_shape(name, array.shape):
                raise InvalidArgument(f"input '{name}': shape {list(array.shape)} is not accepted by the engine")
            self._buffers[name].upload(array, self._stream)
            self.context.set_tensor_address(name, self._buffers[name].ptr)
        results: dict[str, np.ndarray] = {}
        for name in self._outputs:  # every output needs an address, requested or not
            self.context.set_tensor_address(name, self._buffers[name].ptr)
            if name in outputs:
                shape = tuple(self.context.get_tensor_shape(name))
                results[name] = np.empty(shape, dtype=_NUMPY_BY_DATATYPE[self._types[name] or "FP32"])
        if not self.context.execute_async_v3(int(self._stream)):
            raise FerryError("TensorRT execute_async_v3 failed")
        for name, array in results.items():
            self._buffers[name].download(array, self._stream)
        check(self._cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        return results

    def close(self) -> None:
        for buffer in self._buffers.values():
            buffer.free()
        self._buffers.clear()
        if getattr(self, "_stream", None) is not None:
            self._cudart.cudaStreamDestroy(self._stream)
            self._stream = None
        self.context = None
        self.engine = None


class TensorRTBackend(Backend):
    platform = "tensorrt_plan"
    name = "tensorrt"
    default_filename = "model.plan"

    def gpu_available(self) -> bool:
        """A TensorRT engine only runs on a GPU, so KIND_AUTO always means the GPU for it."""
        return True

    def create_instance(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> TensorRTInstance:
        return TensorRTInstance(model_file, config, spec)
