"""What a ``pytorch_libtorch`` config asks of the PyTorch backend, read without importing torch.

Ferry's own switches are ``parameters`` entries, in the style of Triton's PyTorch backend:

- ``ferry_convert_from: "onnx"``: load ``model.onnx`` and convert it with onnx2torch at load time
  instead of loading a TorchScript ``model.pt``;
- ``ferry_precision``: ``fp32`` (default), ``fp16`` (half weights, floating inputs cast to half on
  the device) or ``autocast_fp16`` (FP32 weights, ``torch.autocast`` to float16);
- ``INFERENCE_MODE`` (Triton's key): ``true`` (default) runs under ``torch.inference_mode``;
- ``DISABLE_OPTIMIZED_EXECUTION`` (Triton's key): ``true`` turns off TorchScript's optimising graph
  executor for this model (its first runs per input shape are slow while it profiles).

CUDA graphs and pinned memory use Triton's own config fields: ``optimization { cuda { graphs: true
graph_spec [ { batch_size: 8 } ] } }`` and ``optimization { input_pinned_memory { enable: false } }``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry_client.protocol import model_config_pb2 as mc

from ..errors import ModelLoadError
from .base import config_parameter

CONVERT_FROM = "ferry_convert_from"
PRECISION = "ferry_precision"
INFERENCE_MODE = "INFERENCE_MODE"
DISABLE_OPTIMIZED_EXECUTION = "DISABLE_OPTIMIZED_EXECUTION"
PRECISIONS = ("fp32", "fp16", "autocast_fp16")
CONVERSIONS = ("", "onnx")


@dataclass(frozen=True)
class TorchOptions:
    convert_from: str  # "" (TorchScript) or "onnx"
    precision: str  # one of PRECISIONS
    inference_mode: bool
    optimized_execution: bool
    cuda_graphs: bool
    graph_batch_sizes: tuple[int, ...]  # the buckets a batch is padded to; empty without graphs
    pinned_input: bool
    pinned_output: bool

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> TorchOptions:
        convert_from = (config_parameter(config, CONVERT_FROM) or "").strip().lower()
        if convert_from not in CONVERSIONS:
            raise ModelLoadError(f"parameters['{CONVERT_FROM}']: '{convert_from}' is not supported; use \"onnx\"")
        precision = (config_parameter(config, PRECISION) or "fp32").strip().lower()
        if precision not in PRECISIONS:
            raise ModelLoadError(f"parameters['{PRECISION}']: '{precision}' is not one of {', '.join(PRECISIONS)}")
        optimization = config.optimization
        cuda_graphs = optimization.cuda.graphs
        return cls(
            convert_from=convert_from,
            precision=precision,
            inference_mode=_flag(config, INFERENCE_MODE, default=True),
            optimized_execution=not _flag(config, DISABLE_OPTIMIZED_EXECUTION, default=False),
            cuda_graphs=cuda_graphs,
            graph_batch_sizes=graph_buckets(config) if cuda_graphs else (),
            pinned_input=_pinned(optimization, "input_pinned_memory"),
            pinned_output=_pinned(optimization, "output_pinned_memory"),
        )

    def model_filename(self, config: mc.ModelConfig) -> str:
        if config.default_model_filename:
            return config.default_model_filename
        return "model.onnx" if self.convert_from == "onnx" else "model.pt"


def graph_buckets(config: mc.ModelConfig) -> tuple[int, ...]:
    """Batch sizes to capture a CUDA graph for: ``graph_spec`` sizes when given, else
    :func:`default_buckets` up to and including ``max_batch_size`` (so every batch the scheduler
    forms has a bucket)."""
    limit = config.max_batch_size
    if limit <= 0:
        return ()
    listed = sorted({spec.batch_size for spec in config.optimization.cuda.graph_spec})
    if listed:
        bad = [size for size in listed if not 1 <= size <= limit]
        if bad:
            raise ModelLoadError(
                f"optimization.cuda.graph_spec: batch_size {bad[0]} is outside 1..max_batch_size ({limit})"
            )
        return tuple(listed)
    return default_buckets(limit)


#: Above this size buckets stop doubling and step in multiples of eight (see default_buckets)
DOUBLING_UP_TO = 32


def default_buckets(limit: int) -> tuple[int, ...]:
    """1, 2, 4, ... 32, then steps of 8 (16 from 128, 32 from 256, ...) up to ``limit``, which is
    always a bucket. A replayed graph computes its whole bucket, so doubling all the way would make
    a batch of 65 compute 128; the steps keep the padding under an eighth of the batch above 32
    while the number of graphs grows with the logarithm of ``limit`` (18 for 128)."""
    sizes: list[int] = []
    size = 1
    while size < limit and size < DOUBLING_UP_TO:
        sizes.append(size)
        size *= 2
    while size < limit:
        sizes.append(size)
        size += max(8, 1 << ((size // 8).bit_length() - 1))  # the power of two at most size / 8
    sizes.append(limit)
    return tuple(sizes)


def bucket_for(buckets: tuple[int, ...], batch: int) -> int | None:
    """The smallest bucket that holds ``batch`` items, or None when the batch is larger than all."""
    for size in buckets:
        if size >= batch:
            return size
    return None


def _flag(config: mc.ModelConfig, key: str, default: bool) -> bool:
    value = config_parameter(config, key)
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ModelLoadError(f"parameters['{key}']: expected true or false, got '{value}'")


def _pinned(optimization: mc.ModelOptimizationPolicy, field: str) -> bool:
    """Triton uses pinned buffers unless the config disables them explicitly."""
    if optimization.HasField(field):
        return getattr(optimization, field).enable
    return True
