"""ONNX Runtime backend: one InferenceSession per instance, execution providers from the config.

Execution providers follow Triton's ``optimization { execution_accelerators { ... } }`` syntax and
the instance kind. What the installed onnxruntime lacks falls back to CPU with a warning naming
the missing provider, unless the config insists on the GPU.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ferry_client.protocol import model_config_pb2 as mc

from ..errors import InvalidArgument, ModelLoadError
from .base import InstanceSpec, ModelIO, TensorInfo, config_parameter

log = logging.getLogger(__name__)

_DATATYPE_BY_ORT_TYPE = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}
_ONNX_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16

# Triton's ORT backend maps optimization.graph.level: -1 basic, 1 extended, anything else all.
_GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
}


def _tensor_info(node: Any) -> TensorInfo:
    shape = tuple(dim if isinstance(dim, int) and dim >= 0 else None for dim in (node.shape or ()))
    return TensorInfo(
        name=node.name,
        datatype=_DATATYPE_BY_ORT_TYPE.get(node.type),
        shape=shape,
        engine_type=node.type,
    )


def _tensorrt_options(accelerator: Any, model_dir: Path, device_id: int) -> dict[str, Any]:
    """TensorRT EP options from Triton-style accelerator parameters, caches in the model dir."""
    params = dict(accelerator.parameters)
    precision = params.get("precision_mode", "FP32").upper()
    cache_dir = model_dir / "trt_cache"
    options: dict[str, Any] = {
        "device_id": device_id,
        "trt_fp16_enable": precision in ("FP16", "INT8"),
        "trt_int8_enable": precision == "INT8",
        "trt_engine_cache_enable": params.get("trt_engine_cache_enable", "true").lower() == "true",
        "trt_engine_cache_path": params.get("trt_engine_cache_path", str(cache_dir)),
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": params.get("trt_timing_cache_path", str(cache_dir)),
    }
    if "max_workspace_size_bytes" in params:
        options["trt_max_workspace_size"] = int(params["max_workspace_size_bytes"])
    for key in ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes"):
        if key in params:
            options[key] = params[key]
    return options


def choose_providers(
    config: mc.ModelConfig, spec: InstanceSpec, model_dir: Path, available: list[str]
) -> list[tuple[str, dict[str, Any]]]:
    """Execution providers for one instance, best first, CPU always last as the fallback.

    A GPU instance (KIND_GPU) must get a GPU provider; when none is installed that is a load
    error rather than a silent CPU fallback, because the user asked for the GPU explicitly.
    """
    wanted: list[tuple[str, dict[str, Any]]] = []
    accelerators = config.optimization.execution_accelerators
    if spec.kind == "GPU":
        for accelerator in accelerators.gpu_execution_accelerator:
            name = accelerator.name.lower()
            if name == "tensorrt":
                wanted.append(
                    ("TensorrtExecutionProvider", _tensorrt_options(accelerator, model_dir, spec.device_id))
                )
            elif name == "cuda":
                wanted.append(("CUDAExecutionProvider", {"device_id": spec.device_id}))
            else:
                log.warning("model '%s': unknown GPU execution accelerator '%s' ignored",
                            config.name, accelerator.name)
        cuda_options: dict[str, Any] = {"device_id": spec.device_id}
        if config_parameter(config, "cudnn_conv_algo_search"):
            cuda_options["cudnn_conv_algo_search"] = config_parameter(config, "cudnn_conv_algo_search")
        if not any(name == "CUDAExecutionProvider" for name, _ in wanted):
            wanted.append(("CUDAExecutionProvider", cuda_options))
    for accelerator in accelerators.cpu_execution_accelerator:
        log.warning("model '%s': CPU execution accelerator '%s' is not supported; using the CPU EP",
                    config.name, accelerator.name)
    chosen = [(name, options) for name, options in wanted if name in available]
    missing = [name for name, _ in wanted if name not in available]
    if missing:
        if spec.kind == "GPU" and not chosen:
            raise ModelLoadError(
                f"instance '{spec.name}' is KIND_GPU but onnxruntime has no GPU execution provider "
                f"(missing: {', '.join(missing)}; available: {', '.join(available)}); "
                "install ferry[gpu] or use KIND_CPU / KIND_AUTO"
            )
        log.warning("model '%s' instance '%s': execution providers %s are not available; using %s",
                    config.name, spec.name, ", ".join(missing),
                    ", ".join(name for name, _ in chosen) or "CPUExecutionProvider")
    chosen.append(("CPUExecutionProvider", {}))
    return chosen


class OnnxRuntimeInstance:
    """One ORT session. ``run`` releases the GIL inside ORT, so instances run in parallel threads."""

    def __init__(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> None:
        self.spec = spec
        options = ort.SessionOptions()
        options.graph_optimization_level = _GRAPH_LEVELS.get(
            config.optimization.graph.level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        )
        intra = config_parameter(config, "intra_op_thread_count")
        inter = config_parameter(config, "inter_op_thread_count")
        options.intra_op_num_threads = int(intra) if intra else spec.threads
        if inter:
            options.inter_op_num_threads = int(inter)
        options.log_severity_level = 3
        providers = choose_providers(config, spec, model_file.parent.parent, ort.get_available_providers())
        try:
            self.session = ort.InferenceSession(
                str(model_file),
                sess_options=options,
                providers=[name for name, _ in providers],
                provider_options=[opts for _, opts in providers],
            )
        except Exception as exc:  # ORT raises several private exception types for bad models
            raise ModelLoadError(f"onnxruntime cannot load {model_file}: {exc}") from None
        used = self.session.get_providers()
        self.device = f"cuda:{spec.device_id}" if used and used[0] != "CPUExecutionProvider" else "cpu"
        self.io = ModelIO(
            inputs=[_tensor_info(node) for node in self.session.get_inputs()],
            outputs=[_tensor_info(node) for node in self.session.get_outputs()],
        )
        self._string_inputs = {t.name for t in self.io.inputs if t.datatype == "BYTES"}
        self._bf16 = any(t.datatype == "BF16" for t in (*self.io.inputs, *self.io.outputs))

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """Run one (batched) request; BYTES tensors are converted to and from ORT's str tensors."""
        feeds = {name: self._to_ort(name, array) for name, array in inputs.items()}
        if self._bf16:
            return self._run_ort_values(feeds, outputs)
        results = self.session.run(outputs, feeds)
        return {name: self._from_ort(value) for name, value in zip(outputs, results, strict=False)}

    def _to_ort(self, name: str, array: np.ndarray) -> np.ndarray:
        if name not in self._string_inputs:
            return array
        try:
            return np.vectorize(lambda item: item.decode("utf-8"), otypes=[object])(array)
        except UnicodeDecodeError:
            raise InvalidArgument(f"input '{name}': BYTES elements must be UTF-8 text for this model") from None

    @staticmethod
    def _from_ort(value: Any) -> np.ndarray:
        array = np.asarray(value)
        if array.dtype.kind in ("U", "O"):
            return np.vectorize(
                lambda item: item.encode("utf-8") if isinstance(item, str) else bytes(item), otypes=[object]
            )(array) if array.size else array.astype(object)
        return array

    def _run_ort_values(self, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """bfloat16 has no numpy type: pass its bit patterns as typed OrtValues."""
        bf16_inputs = {t.name for t in self.io.inputs if t.datatype == "BF16"}
        values = {
            name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(array), _ONNX_BFLOAT16)
            if name in bf16_inputs
            else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array) if array.dtype != object else array)
            for name, array in feeds.items()
        }
        results = self.session.run_with_ort_values(outputs, values)
        out: dict[str, np.ndarray] = {}
        for name, value in zip(outputs, results, strict=True):
            if value.data_type() == "tensor(bfloat16)":
                # OrtValue.numpy() has no bfloat16; copy the raw 16-bit patterns out instead.
                raw = ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes())
                out[name] = np.frombuffer(raw, dtype=np.uint16).reshape(value.shape())
            else:
                out[name] = self._from_ort(value.numpy())
        return out

    def close(self) -> None:
        del self.session


class OnnxRuntimeBackend:
    platform = "onnxruntime_onnx"
    name = "onnxruntime"
    default_filename = "model.onnx"

    def model_filename(self, config: mc.ModelConfig) -> str:
        return config.default_model_filename or self.default_filename

    def gpu_available(self) -> bool:
        return "CUDAExecutionProvider" in ort.get_available_providers()

    def create_instance(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> OnnxRuntimeInstance:
        return OnnxRuntimeInstance(model_file, config, spec)
