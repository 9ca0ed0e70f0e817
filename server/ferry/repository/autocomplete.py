"""Completing and checking a config against what the model file really declares.

A repository may omit config.pbtxt or give only part of it (Triton's auto-complete). Everything
the config states is checked against the engine's view of the model so that mismatches fail at
load time with a message naming the tensor, never at request time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferry_client.codec import config_type_from_datatype
from ferry_client.protocol import model_config_pb2 as mc

from ..backends.base import ModelIO, TensorInfo
from ..errors import ModelLoadError

if TYPE_CHECKING:
    from .config import ConfigTensor, ConfigTensors

DEFAULT_MAX_BATCH_SIZE = 4


def _batchable(io: ModelIO) -> bool:
    return all(t.shape and t.shape[0] is None for t in (*io.inputs, *io.outputs))


def complete_config(config: mc.ModelConfig, io: ModelIO, source: str) -> None:
    """Fill what the config leaves out from the model, then check the two agree (in place).

    max_batch_size is inferred only when the config declares no tensors at all, so an explicit
    ``max_batch_size: 0`` next to declared tensors is respected.
    """
    declared_nothing = not config.input and not config.output
    if declared_nothing and config.max_batch_size == 0 and _batchable(io):
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE
        if not config.HasField("dynamic_batching"):
            config.dynamic_batching.SetInParent()
    batched = config.max_batch_size > 0
    _complete_tensors(config.input, io.inputs, batched, "input", source, add_missing=True)
    _complete_tensors(
        config.output, io.outputs, batched, "output", source, add_missing=declared_nothing or not config.output
    )


def _complete_tensors(
    declared: ConfigTensors, actual: list[TensorInfo], batched: bool, kind: str, source: str, add_missing: bool
) -> None:
    by_name = {t.name: t for t in actual}
    names = {t.name for t in declared}
    for tensor in declared:
        info = by_name.get(tensor.name)
        if info is None:
            raise ModelLoadError(
                f"{source}: {kind} '{tensor.name}' is not an {kind} of the model "
                f"(the model's {kind}s: {', '.join(by_name) or 'none'})"
            )
        _check_tensor(tensor, info, batched, kind, source)
    if add_missing:
        for info in actual:
            if info.name not in names:
                tensor = declared.add()
                tensor.name = info.name
                _check_tensor(tensor, info, batched, kind, source)


def _model_dims(info: TensorInfo, batched: bool, kind: str, source: str) -> list[int]:
    shape = list(info.shape)
    if batched:
        if not shape or shape[0] is not None:
            raise ModelLoadError(
                f"{source}: max_batch_size > 0 needs a variable first (batch) dimension, but {kind} "
                f"'{info.name}' has shape {_shape_text(info.shape)}; set max_batch_size: 0"
            )
        shape = shape[1:]
    return [-1 if d is None else d for d in shape]


def _shape_text(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _check_tensor(tensor: ConfigTensor, info: TensorInfo, batched: bool, kind: str, source: str) -> None:
    if info.datatype is None:
        raise ModelLoadError(
            f"{source}: {kind} '{info.name}' has type {info.engine_type}, which the V2 protocol cannot carry"
        )
    model_type = getattr(mc, config_type_from_datatype(info.datatype))
    if tensor.data_type == mc.TYPE_INVALID:
        tensor.data_type = model_type
    elif tensor.data_type != model_type:
        raise ModelLoadError(
            f"{source}: {kind} '{tensor.name}' is {mc.DataType.Name(tensor.data_type)} in the config "
            f"but {mc.DataType.Name(model_type)} in the model"
        )
    dims = _model_dims(info, batched, kind, source)
    if not tensor.dims:
        tensor.dims.extend(dims or [1])
        return
    if tensor.HasField("reshape"):
        return  # the config maps its dims onto the model's shape explicitly
    declared = list(tensor.dims)
    compatible = len(declared) == len(dims) and all(m == -1 or d == m for d, m in zip(declared, dims, strict=False))
    if not compatible:
        full = [-1, *declared] if batched else declared
        raise ModelLoadError(
            f"{source}: {kind} '{tensor.name}' has dims {declared} in the config (full shape {full}) "
            f"but the model's shape is {_shape_text(info.shape)}"
        )
