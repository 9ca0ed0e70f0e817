"""Batches of torch tensors that live on a device (``scheduling.interface.Memory.DEVICE``): what a
device pre-processor's output is joined, batched and handed to the engine as, without a host copy.

Imported only where an execution's inputs are device tensors (torch is optional), so the host path
never loads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch


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
    return {name: tensor.cpu().numpy() for name, tensor in inputs.items()}


def on_device(inputs: Mapping[str, object]) -> bool:
    """Whether any input is a torch tensor (a device pre-processor's output), not a host array."""
    return any(isinstance(value, torch.Tensor) for value in inputs.values())
