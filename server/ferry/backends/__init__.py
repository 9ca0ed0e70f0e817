"""Engines that execute a model: one module per runtime, chosen by the config's platform/backend."""

from __future__ import annotations

from .base import Backend, Instance, InstanceSpec, ModelIO, TensorInfo
from .registry import backend_for, platform_for_file

__all__ = [
    "Backend",
    "Instance",
    "InstanceSpec",
    "ModelIO",
    "TensorInfo",
    "backend_for",
    "platform_for_file",
]
