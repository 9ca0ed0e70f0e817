"""ONNX Runtime backend: one InferenceSession per instance, execution providers from the config.

Execution providers follow Triton's ``optimization { execution_accelerators { ... } }`` syntax and
the instance kind. What the installed onnxruntime lacks falls back to CPU with a warning naming
the missing provider, unless the config insists on the GPU.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ferry_client.codec import numpy_dtype
from ferry_client.protocol import model_config_pb2 as mc

from ..cli_errors import install_hint
from ..cores import usable_cores
from ..errors import InvalidArgument, ModelLoadError
from ..paths import inside
from .base import Backend, Instance, InstanceSpec, ModelIO, TensorInfo, config_parameter
from .batch_profile import batch_profile, profile_option_strings

#: ONNX Runtime's error for inputs its graph refuses (status INVALID_ARGUMENT).
ORT_INVALID_ARGUMENT = ort.capi.onnxruntime_pybind11_state.InvalidArgument

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


# Triton's ORT backend takes cudnn_conv_algo_search as 0/1/2; ONNX Runtime wants the names.
_CUDNN_ALGO_SEARCH = {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"}

#: A run whose inputs reach this many bytes gives back, at its end, what ONNX Runtime's CPU memory
#: arena grew by for it. Why: the arena keeps its largest chunks for good, so one client's burst of
#: large tensors left the server 140-160 MB bigger (docs/reliability.md); smaller runs keep the
#: arena's speed (shrinking every run would free and fault in the same pages each time): a batch of
#: 32 ResNet-50 inputs (19 MiB) stays below it.
SHRINK_ARENA_AFTER_BYTES = 32 * 2**20


def _shrinking_run_options() -> Any:
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def _tensorrt_options(
    accelerator: Any,
    model_dir: Path,
    device_id: int,
    config: mc.ModelConfig,
    input_dims: Mapping[str, Sequence[int]] | None,
) -> dict[str, Any]:
    """TensorRT EP options from Triton-style accelerator parameters, caches in the model dir.

    Without explicit ``trt_profile_*_shapes``, the profile spans batch 1..max_batch_size with the
    largest preferred batch as the optimum (``batch_profile``), so TensorRT builds one engine for
    every batch the scheduler can form instead of rebuilding when a new batch size appears.
    """
    params = dict(accelerator.parameters)
    precision = params.get("precision_mode", "FP32").upper()
    options: dict[str, Any] = {
        "device_id": device_id,
        "trt_fp16_enable": precision in ("FP16", "INT8"),
        "trt_int8_enable": precision == "INT8",
        "trt_engine_cache_enable": params.get("trt_engine_cache_enable", "true").lower() == "true",
        # Cache paths from the config (which the load API can replace) must stay in the model directory.
        "trt_engine_cache_path": str(
            inside(model_dir, params.get("trt_engine_cache_path", "trt_cache"), "trt_engine_cache_path")
        ),
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": str(
            inside(model_dir, params.get("trt_timing_cache_path", "trt_cache"), "trt_timing_cache_path")
        ),
    }
    if "max_workspace_size_bytes" in params:
        options["trt_max_workspace_size"] = int(params["max_workspace_size_bytes"])
    explicit = {
        key: params[key]
        for key in ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")
        if key in params
    }
    if explicit:
        options.update(explicit)
    elif config.max_batch_size > 0 and input_dims:
        try:
            options.update(profile_option_strings(batch_profile(config, input_dims)))
        except ModelLoadError as exc:  # variable non-batch dims: let the provider handle shapes itself
            log.info("model '%s': no TensorRT profile from the config: %s", config.name, exc)
    return options


def static_shapes(config: mc.ModelConfig, input_dims: Mapping[str, Sequence[int]] | None) -> bool:
    """Every request has the same input shapes: no batch dimension and no variable dims."""
    return (
        config.max_batch_size == 0
        and bool(input_dims)
        and all(d >= 0 for dims in (input_dims or {}).values() for d in dims)
    )


def _cuda_options(
    config: mc.ModelConfig, device_id: int, input_dims: Mapping[str, Sequence[int]] | None
) -> dict[str, Any]:
    """CUDA EP options: device, cuDNN convolution algorithm search, and CUDA graphs.

    ``optimization { cuda { graphs: true } }`` turns on CUDA graph capture only when shapes are
    static, because a captured graph replays fixed shapes at fixed addresses.
    """
    options: dict[str, Any] = {"device_id": device_id}
    search = config_parameter(config, "cudnn_conv_algo_search")
    if search:
        value = _CUDNN_ALGO_SEARCH.get(search.strip(), search.strip().upper())
        if value not in _CUDNN_ALGO_SEARCH.values():
            raise ModelLoadError(
                f"parameter cudnn_conv_algo_search '{search}': use EXHAUSTIVE (0), HEURISTIC (1) or DEFAULT (2)"
            )
        options["cudnn_conv_algo_search"] = value
    if config.optimization.cuda.graphs:
        if static_shapes(config, input_dims):
            options["enable_cuda_graph"] = True
        else:
            log.warning(
                "model '%s': optimization.cuda.graphs needs static shapes (max_batch_size 0 and fixed dims); "
                "CUDA graphs stay off",
                config.name,
            )
    return options


def choose_providers(
    config: mc.ModelConfig,
    spec: InstanceSpec,
    model_dir: Path,
    available: list[str],
    input_dims: Mapping[str, Sequence[int]] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """Execution providers for one instance, best first, CPU always last as the fallback.

    A GPU instance (KIND_GPU) must get a GPU provider; when none is installed that is a load
    error rather than a silent CPU fallback, because the user asked for the GPU explicitly.
    ``input_dims`` (without the batch dimension) feed the TensorRT profile and the CUDA graph check.
    """
    wanted: list[tuple[str, dict[str, Any]]] = []
    accelerators = config.optimization.execution_accelerators
    if spec.kind == "GPU":
        cuda_options = _cuda_options(config, spec.device_id, input_dims)
        for accelerator in accelerators.gpu_execution_accelerator:
            name = accelerator.name.lower()
            if name == "tensorrt":
                wanted.append(
                    (
                        "TensorrtExecutionProvider",
                        _tensorrt_options(accelerator, model_dir, spec.device_id, config, input_dims),
                    )
                )
            elif name == "cuda":
                wanted.append(("CUDAExecutionProvider", cuda_options))
            else:
                log.warning("model '%s': unknown GPU execution accelerator '%s' ignored", config.name, accelerator.name)
        if not any(name == "CUDAExecutionProvider" for name, _ in wanted):
            wanted.append(("CUDAExecutionProvider", cuda_options))
    for accelerator in accelerators.cpu_execution_accelerator:
        log.warning(
            "model '%s': CPU execution accelerator '%s' is not supported; using the CPU EP",
            config.name,
            accelerator.name,
        )
    chosen = [(name, options) for name, options in wanted if name in available]
    missing = [name for name, _ in wanted if name not in available]
    if missing:
        if spec.kind == "GPU" and not chosen:
            raise ModelLoadError(
                f"instance '{spec.name}' is KIND_GPU but onnxruntime has no GPU execution provider "
                f"(missing: {', '.join(missing)}; available: {', '.join(available)}); "
                f"{install_hint('gpu')}, or use KIND_CPU / KIND_AUTO"
            )
        log.warning(
            "model '%s' instance '%s': execution providers %s are not available; using %s",
            config.name,
            spec.name,
            ", ".join(missing),
            ", ".join(name for name, _ in chosen) or "CPUExecutionProvider",
        )
    chosen.append(("CPUExecutionProvider", {}))
    return chosen


def input_dims_of(config: mc.ModelConfig, model_file: Path) -> dict[str, list[int]]:
    """Input dims without the batch dimension: from the config when it declares them, else from the
    ONNX graph (read without weights), -1 for anything variable."""
    if config.input and all(tensor.dims for tensor in config.input):
        return {tensor.name: list(tensor.dims) for tensor in config.input}
    try:
        graph = onnx.load(str(model_file), load_external_data=False).graph
    except Exception:  # an unreadable model fails with a better message when the session loads it
        return {}
    initializers = {init.name for init in graph.initializer}
    dims: dict[str, list[int]] = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim]
        dims[value.name] = shape[1:] if config.max_batch_size > 0 else shape
    return dims


class FixedBindingRunner:
    """Runs a session through IOBinding with inputs and outputs at fixed addresses on its device.

    CUDA graphs replay captured kernels on the very buffers they were captured with, so each
    request's data is copied into the same pre-allocated OrtValues rather than handed over afresh.
    """

    def __init__(self, session: ort.InferenceSession, device: str, device_id: int) -> None:
        self._session = session
        self._binding = session.io_binding()
        self._inputs: dict[str, ort.OrtValue] = {}
        self._outputs: dict[str, ort.OrtValue] = {}
        for node in session.get_inputs():
            value = ort.OrtValue.ortvalue_from_shape_and_type(node.shape, _numpy_type(node.type), device, device_id)
            self._inputs[node.name] = value
            self._binding.bind_ortvalue_input(node.name, value)
        for node in session.get_outputs():
            value = ort.OrtValue.ortvalue_from_shape_and_type(node.shape, _numpy_type(node.type), device, device_id)
            self._outputs[node.name] = value
            self._binding.bind_ortvalue_output(node.name, value)

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        for name, array in inputs.items():
            target = self._inputs[name]
            if tuple(array.shape) != tuple(target.shape()):
                raise InvalidArgument(
                    f"input '{name}': shape {list(array.shape)} differs from the static shape "
                    f"{target.shape()} this model is captured with"
                )
            target.update_inplace(np.ascontiguousarray(array))
        self._session.run_with_iobinding(self._binding)
        return {name: self._outputs[name].numpy() for name in outputs}


def _numpy_type(ort_type: str) -> type:
    datatype = _DATATYPE_BY_ORT_TYPE.get(ort_type)
    if datatype is None or datatype in ("BYTES", "BF16"):
        raise ModelLoadError(f"a fixed-address binding cannot hold {ort_type} tensors")
    return numpy_dtype(datatype).type


def thread_count(config: mc.ModelConfig, name: str) -> int | None:
    """A thread-count parameter, at most the usable cores (None: not set, or 0 = ORT decides).

    Why clamp: the parameter may come from anyone allowed to call the load API, and ORT starts the
    threads it is told to (1,000 of them took a reload 40 s and starved every client); a config
    tuned for a bigger machine still loads, with a warning saying what it got."""
    value = config_parameter(config, name)
    if not value:
        return None
    try:
        count = int(value)
    except ValueError:
        raise ModelLoadError(f"parameter {name} must be a whole number of threads, got '{value}'") from None
    if count < 0:
        raise ModelLoadError(f"parameter {name} must not be negative, got {count}")
    cores = usable_cores()
    if count > cores:
        log.warning(
            "model '%s': parameter %s %d exceeds the %d usable cores; using %d", config.name, name, count, cores, cores
        )
        return cores
    return count or None


class OnnxRuntimeInstance(Instance):
    """One ORT session. ``compute`` releases the GIL inside ORT, so instances run in parallel threads."""

    inline_when_fast = True  # compute waits on nothing but ORT: see scheduling.scheduler.INLINE_BELOW_NS

    def __init__(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> None:
        self.spec = spec
        options = ort.SessionOptions()
        options.graph_optimization_level = _GRAPH_LEVELS.get(
            config.optimization.graph.level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        )
        intra = thread_count(config, "intra_op_thread_count")
        inter = thread_count(config, "inter_op_thread_count")
        options.intra_op_num_threads = intra if intra is not None else spec.threads
        if inter is not None:
            options.inter_op_num_threads = inter
        options.log_severity_level = 3
        dims = input_dims_of(config, model_file) if spec.kind == "GPU" else None  # only GPU options use them
        providers = choose_providers(config, spec, model_file.parent.parent, ort.get_available_providers(), dims)
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
            metadata=dict(self.session.get_modelmeta().custom_metadata_map),
        )
        self._string_inputs = {t.name for t in self.io.inputs if t.datatype == "BYTES"}
        self._bf16 = any(t.datatype == "BF16" for t in (*self.io.inputs, *self.io.outputs))
        self._fixed: FixedBindingRunner | None = None
        self._shrinking = _shrinking_run_options()
        cuda = self.session.get_provider_options().get("CUDAExecutionProvider", {})
        if used and used[0] == "CUDAExecutionProvider" and str(cuda.get("enable_cuda_graph", "0")) == "1":
            self._fixed = FixedBindingRunner(self.session, "cuda", spec.device_id)  # CUDA graphs need it

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """Run one (batched) request; BYTES tensors are converted to and from ORT's str tensors."""
        if self._fixed is not None:
            return self._fixed.compute(inputs, outputs)
        feeds = {name: self._to_ort(name, array) for name, array in inputs.items()}
        try:
            if self._bf16:
                return self._compute_ort_values(feeds, outputs)
            large = sum(array.nbytes for array in inputs.values()) >= SHRINK_ARENA_AFTER_BYTES
            results = self.session.run(outputs, feeds, self._shrinking if large else None)
        except ORT_INVALID_ARGUMENT as exc:
            # the inputs passed the config's dims but not the graph (a zero-sized -1 dimension
            # under a convolution, say): the caller's to fix, and only the requests of this batch,
            # whose inputs share these shapes, see it
            raise InvalidArgument(f"the model cannot run on these inputs: {exc}") from None
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
            return (
                np.vectorize(
                    lambda item: item.encode("utf-8") if isinstance(item, str) else bytes(item), otypes=[object]
                )(array)
                if array.size
                else array.astype(object)
            )
        return array

    def _compute_ort_values(self, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
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


class OnnxRuntimeBackend(Backend):
    platform = "onnxruntime_onnx"
    name = "onnxruntime"
    default_filename = "model.onnx"

    def gpu_available(self) -> bool:
        return "CUDAExecutionProvider" in ort.get_available_providers()

    def create_instance(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> OnnxRuntimeInstance:
        return OnnxRuntimeInstance(model_file, config, spec)
