"""Getting a ``torch.nn.Module`` and its tensor contract from a repository file.

TorchScript files are opened with ``torch.jit.load`` only (never ``torch.load``, whose pickle
format can run code). TorchScript records no tensor names or types, so a TorchScript model's inputs
and outputs come from the config, which must declare them; arguments bind by Triton's
``NAME__<index>`` convention, else by the names of ``forward``'s parameters, else in config order.
An ONNX file is parsed as protobuf by ``onnx`` and converted by onnx2torch; its inputs and outputs
come from the ONNX graph, in graph order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ferry_client.codec import datatype_from_config, v2_datatype
from ferry_client.protocol import model_config_pb2 as mc

from ..cli_errors import install_hint
from ..errors import ModelLoadError
from ..gpu.device_tensors import TORCH_DTYPES
from .base import ModelIO, TensorInfo

_INDEXED = re.compile(r"^.*__(\d+)$")
_ONNX_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16
_ONNX_STRING = 8  # onnx.TensorProto.STRING


@dataclass(frozen=True)
class LoadedModule:
    """A module ready to call positionally, with the order its arguments and results bind in."""

    module: torch.nn.Module
    io: ModelIO
    input_order: list[str]  # positional arguments of forward
    output_order: list[str]  # positions of a tuple/list result (dict results bind by key)


def torch_dtype(info: TensorInfo) -> torch.dtype:
    if info.datatype not in TORCH_DTYPES:
        raise ModelLoadError(
            f"tensor '{info.name}': datatype {info.datatype or info.engine_type} "
            "has no torch tensor type (the PyTorch backend cannot serve it)"
        )
    return TORCH_DTYPES[info.datatype]


def load_torchscript(path: Path, config: mc.ModelConfig, device: torch.device) -> LoadedModule:
    try:
        module = torch.jit.load(str(path), map_location=device)
    except Exception as exc:  # torch raises RuntimeError / ValueError variants for bad archives
        raise ModelLoadError(f"torch.jit.load cannot load {path} as TorchScript: {exc}") from None
    io = config_io(config)
    names = [info.name for info in io.inputs]
    order = argument_order(names, forward_parameters(module))
    return LoadedModule(module, io, order, indexed_or_declared([info.name for info in io.outputs]))


def load_onnx(path: Path) -> LoadedModule:
    """Parse an ONNX file and convert it with onnx2torch (imported here: it is an optional extra)."""
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # DecodeError and OSError variants
        raise ModelLoadError(f"cannot parse {path} as ONNX: {exc}") from None
    try:
        from onnx2torch import convert
    except Exception as exc:  # ImportError, or torchvision failing to load against this torch build
        raise ModelLoadError(
            f"ferry_convert_from 'onnx' needs onnx2torch, which could not be imported ({type(exc).__name__}: "
            f"{exc}); {install_hint('torch')}, with a torchvision build that matches torch {torch.__version__}"
        ) from None
    io = onnx_io(model)
    try:
        module = convert(model)
    except Exception as exc:  # onnx2torch raises NotImplementedError for unsupported operators
        raise ModelLoadError(f"onnx2torch cannot convert {path}: {type(exc).__name__}: {exc}") from None
    return LoadedModule(module, io, [info.name for info in io.inputs], [info.name for info in io.outputs])


def config_io(config: mc.ModelConfig) -> ModelIO:
    """Inputs and outputs as the config declares them (the batch dimension prepended as dynamic)."""
    if not config.input or not config.output:
        raise ModelLoadError(
            "a pytorch_libtorch (TorchScript) model must declare every input and output in config.pbtxt: "
            "TorchScript records no tensor names, types or shapes"
        )
    batched = config.max_batch_size > 0

    def info(tensor: Any) -> TensorInfo:
        datatype = datatype_from_config(mc.DataType.Name(tensor.data_type))
        dims = tuple(None if d < 0 else int(d) for d in tensor.dims)
        return TensorInfo(tensor.name, datatype, ((None, *dims) if batched else dims), engine_type="torch")

    return ModelIO([info(t) for t in config.input], [info(t) for t in config.output])


def onnx_io(model: Any) -> ModelIO:
    """Graph inputs (initializers excluded) and outputs with V2 datatypes and shapes."""
    from onnx import helper

    initializers = {init.name for init in model.graph.initializer}

    def info(value: Any) -> TensorInfo:
        tensor_type = value.type.tensor_type
        elem = tensor_type.elem_type
        if elem == _ONNX_BFLOAT16:
            datatype: str | None = "BF16"
        elif elem == _ONNX_STRING:
            datatype = "BYTES"
        else:
            try:
                datatype = v2_datatype(helper.tensor_dtype_to_np_dtype(elem))
            except Exception:  # a type the V2 protocol has no name for
                datatype = None
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
        return TensorInfo(value.name, datatype, shape, engine_type=f"onnx:{elem}")

    inputs = [info(v) for v in model.graph.input if v.name not in initializers]
    return ModelIO(inputs, [info(v) for v in model.graph.output])


def forward_parameters(module: Any) -> list[str] | None:
    """Names of a TorchScript module's ``forward`` parameters (``self`` excluded), if it has a schema."""
    try:
        return [argument.name for argument in module.forward.schema.arguments[1:]]
    except (AttributeError, RuntimeError):
        return None


def argument_order(names: list[str], parameters: list[str] | None) -> list[str]:
    """Positional order of the config's inputs: ``NAME__<i>``, else forward's parameter names, else as declared."""
    if parameters is not None and len(parameters) < len(names):
        raise ModelLoadError(
            f"the model's forward takes {len(parameters)} tensor(s) ({', '.join(parameters) or 'none'}) but the "
            f"config declares {len(names)} inputs ({', '.join(names)})"
        )
    if names and all(_INDEXED.match(name) for name in names):
        return indexed_or_declared(names)
    if parameters is not None and set(names) == set(parameters[: len(names)]):
        return parameters[: len(names)]
    return names


def indexed_or_declared(names: list[str]) -> list[str]:
    """Sort by the ``__<index>`` suffix when every name has one (Triton's convention), else keep the order."""
    matches = [_INDEXED.match(name) for name in names]
    if names and all(matches):
        indices = [int(m.group(1)) for m in matches if m]
        if sorted(indices) != list(range(len(names))):
            raise ModelLoadError(f"tensor names {names}: the __<index> suffixes must be 0..{len(names) - 1}")
        return [name for _, name in sorted(zip(indices, names, strict=True))]
    return list(names)


def to_tensor(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A tensor sharing ``array``'s memory (BF16 arrives as uint16 bit patterns)."""
    if dtype is torch.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A host tensor as numpy, without a copy (BF16 leaves as uint16 bit patterns, as the codec wants)."""
    if tensor.dtype is torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()
