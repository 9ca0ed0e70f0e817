"""Building a TensorRT engine (``model.plan``) from an FP16 or QDQ INT8 ONNX model.

The network is created *strongly typed*: precisions come from the ONNX graph itself (FP16
tensors from the FP16 model, INT8 from the QDQ model's Quantize/Dequantize pairs) rather than
from the builder's FP16/INT8 flags and an INT8 calibrator, which TensorRT 10 deprecates and
later versions drop. The optimization profile comes from the config (``batch_profile``). A
timing cache kept in the model directory makes rebuilds fast. The engine file is named after the
GPU's compute capability and recorded in ``cc_model_filenames``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ferry_client.protocol import model_config_pb2 as mc

from ..backends.batch_profile import batch_profile
from ..backends.cuda_runtime import check, compute_capability, device_count, import_cudart
from ..backends.tensorrt import collecting_logger, import_tensorrt
from ..errors import FerryError
from .calibration import OptimizeError


@dataclass(frozen=True)
class EngineBuild:
    path: Path
    compute_capability: str
    tensorrt_version: str
    seconds: float


def engine_filename(capability: str) -> str:
    """``model_sm90.plan`` for compute capability 9.0."""
    return f"model_sm{capability.replace('.', '')}.plan"


def tensorrt_available() -> str | None:
    """Why an engine cannot be built here, or None when TensorRT, cuda-python and a GPU are present."""
    try:
        cudart = import_cudart()
        import_tensorrt()
    except FerryError as exc:
        return str(exc)
    if device_count(cudart) == 0:
        return "no CUDA GPU is visible to this process"
    return None


def build_engine(
    onnx_path: Path,
    config: mc.ModelConfig,
    output_dir: Path,
    timing_cache: Path,
    device_id: int = 0,
    workspace_bytes: int | None = None,
) -> EngineBuild:
    """Build and write the engine for GPU ``device_id``; ``config`` is the completed model config."""
    started = time.perf_counter()
    trt, cudart = import_tensorrt(), import_cudart()
    check(cudart.cudaSetDevice(device_id), "cudaSetDevice")
    capability = compute_capability(cudart, device_id)
    logger = collecting_logger(trt)
    builder = trt.Builder(logger)
    # TensorRT 10 needs the flag; 11 makes every network strongly typed and may drop it.
    strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    network = builder.create_network(0 if strongly_typed is None else 1 << int(strongly_typed))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise OptimizeError(f"TensorRT's ONNX parser rejected {onnx_path.name}: {errors}")
    builder_config = builder.create_builder_config()
    if workspace_bytes:
        builder_config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    cache = builder_config.create_timing_cache(timing_cache.read_bytes() if timing_cache.is_file() else b"")
    builder_config.set_timing_cache(cache, False)
    dims = {tensor.name: list(tensor.dims) for tensor in config.input}
    if config.max_batch_size > 0:
        profile = builder.create_optimization_profile()
        for name, shapes in batch_profile(config, dims).items():
            profile.set_shape(name, shapes.min, shapes.opt, shapes.max)
        builder_config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, builder_config)
    if serialized is None:
        raise OptimizeError(f"TensorRT could not build an engine: {'; '.join(logger.errors) or 'no detail'}")
    path = output_dir / engine_filename(capability)
    path.write_bytes(bytes(serialized))
    timing_cache.parent.mkdir(parents=True, exist_ok=True)
    timing_cache.write_bytes(bytes(cache.serialize()))
    return EngineBuild(path, capability, trt.__version__, time.perf_counter() - started)
