"""Batches of torch tensors that live on a device (``scheduling.interface.Memory.DEVICE``): what a
device pre-processor's output, or a client's CUDA shared memory region, is joined, batched and
handed to the engine as, without a host copy.

Imported only where an execution's inputs or outputs are device tensors (torch is optional), so the
host path never loads it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import torch

#: V2 datatype -> torch dtype. BYTES has no tensor type; unsigned 16/32/64-bit need torch >= 2.3.
TORCH_DTYPES: dict[str, torch.dtype] = {
    name: dtype
    for name, dtype in {
        "BOOL": torch.bool,
        "UINT8": torch.uint8,
        "UINT16": getattr(torch, "uint16", None),
        "UINT32": getattr(torch, "uint32", None),
        "UINT64": getattr(torch, "uint64", None),
        "INT8": torch.int8,
        "INT16": torch.int16,
        "INT32": torch.int32,
        "INT64": torch.int64,
        "FP16": torch.float16,
        "FP32": torch.float32,
        "FP64": torch.float64,
        "BF16": torch.bfloat16,
    }.items()
    if dtype is not None
}


def signature(inputs: Mapping[str, torch.Tensor], batched: bool) -> tuple:
    """What must be equal for two device executions to share a batch: names, devices, dtypes and
    non-batch shapes. A torch dtype's name (``torch.float32``) never equals a numpy dtype string
    (``<f4``), so device and host executions are never batched together."""
    skip = 1 if batched else 0
    return tuple(
        sorted((name, f"{tensor.device}:{tensor.dtype}", tuple(tensor.shape[skip:])) for name, tensor in inputs.items())
    )


def join(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """Tensors joined along the batch axis on their device (one ``torch.cat``, no host copy)."""
    return parts[0] if len(parts) == 1 else torch.cat(list(parts))


def to_host(inputs: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The tensors as host arrays, for an engine that reads host memory only (one copy each; none
    on torch's CPU device)."""
    return {name: host_array(tensor) for name, tensor in inputs.items()}


def host_array(tensor: torch.Tensor) -> np.ndarray:
    """A tensor in host memory as numpy (BF16 as uint16 bit patterns, as the codec wants)."""
    if tensor.dtype is torch.bfloat16:
        return tensor.cpu().view(torch.int16).numpy().view(np.uint16)
    return tensor.cpu().numpy()


def on_device(inputs: Mapping[str, object]) -> bool:
    """Whether any input is a torch tensor (a device pre-processor's output), not a host array."""
    return any(isinstance(value, torch.Tensor) for value in inputs.values())


def beside(inputs: Mapping[str, Any], datatypes: Mapping[str, str], device: torch.device) -> dict[str, torch.Tensor]:
    """A request's inputs all on ``device``: host arrays (its other inputs, beside those a CUDA
    region holds) copied there once, so the execution's tensors live in one place (BF16 arrives as
    uint16 bit patterns)."""
    placed = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            bf16 = datatypes.get(name) == "BF16"
            value = torch.tensor(value.view(np.int16) if bf16 else value, device=device)
            value = value.view(torch.bfloat16) if bf16 else value
        placed[name] = value
    return placed


def host_except(outputs: Mapping[str, Any], kept: Collection[str]) -> dict[str, Any]:
    """One request's share of a batch's outputs, those it did not ask to keep on the device
    (``kept``) brought to host memory: another request of its batch asked for them there."""
    return {
        name: host_array(value) if isinstance(value, torch.Tensor) and name not in kept else value
        for name, value in outputs.items()
    }
