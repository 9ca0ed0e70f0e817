"""The ``ferry_vision`` backend: a vision step's instance, built from its config.

A step needs no model file: the version directory only marks which versions exist. Its inputs
and outputs must be declared in the config (there is no file to complete them from); each step
kind checks the tensor names it needs at load.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
from google.protobuf import text_format
from google.protobuf.message import Message

from ferry_client.codec import datatype_from_config
from ferry_client.protocol import model_config_pb2 as mc

from ...config_ranges import check_message_ranges
from ...errors import ModelLoadError
from ..base import Backend, Instance, InstanceSpec, ModelIO, TensorInfo, config_parameter
from . import STEP_PARAMETER

PLATFORM = "ferry_vision"
M = TypeVar("M", bound=Message)


class StepCompute(Protocol):
    def __call__(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]: ...


class StepInstance(Instance):
    """One instance of a vision step: its ``compute`` is the step's function."""

    def __init__(self, spec: InstanceSpec, io: ModelIO, step: StepCompute, device: str = "cpu") -> None:
        self.spec = spec
        self.io = io
        self.device = device
        self._step = step

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        return self._step(inputs, outputs)

    def close(self) -> None:
        """Nothing to free: a step holds no engine."""


def tensor_dims(config: mc.ModelConfig, kind: str, name: str) -> tuple[int, ...]:
    """The declared dims (without the batch dimension) of a tensor the step needs."""
    for tensor in getattr(config, kind):
        if tensor.name == name:
            return tuple(tensor.dims)
    declared = ", ".join(t.name for t in getattr(config, kind)) or "none"
    raise ModelLoadError(f"needs {kind} '{name}' (declared: {declared})")


def tensor_datatype(config: mc.ModelConfig, kind: str, name: str) -> str:
    tensor = next(t for t in getattr(config, kind) if t.name == name)
    return datatype_from_config(mc.DataType.Name(tensor.data_type))


def settings(config: mc.ModelConfig, key: str, message: type[M]) -> M:
    """A ``parameters`` entry holding a Ferry pipeline message in text format (e.g. FerryPreprocess)."""
    text = config_parameter(config, key)
    parsed = message()
    if text is None:
        return parsed
    try:
        text_format.Parse(text, parsed)
    except text_format.ParseError as exc:
        raise ModelLoadError(f"parameters '{key}': {exc}") from None
    if isinstance(parsed, mc.FerryPreprocess) and parsed.device == mc.FerryPreprocess.GPU:
        raise ModelLoadError(f"parameters '{key}': device: GPU is not supported in a vision step (CPU only)")
    check_message_ranges(parsed, f"ferry_image.{key}.", f"parameters '{key}'")  # as in a model's ferry_image
    return parsed


def _io(config: mc.ModelConfig) -> ModelIO:
    batched = config.max_batch_size > 0

    def info(tensor: mc.ModelInput | mc.ModelOutput) -> TensorInfo:
        dims = tuple(None if d == -1 else d for d in tensor.dims)
        return TensorInfo(
            tensor.name, datatype_from_config(mc.DataType.Name(tensor.data_type)), (None, *dims) if batched else dims
        )

    return ModelIO([info(t) for t in config.input], [info(t) for t in config.output])


class VisionStepBackend(Backend):
    """Creates vision step instances (``backend: "ferry_vision"``)."""

    platform = PLATFORM
    name = PLATFORM
    default_filename = ""

    def model_filename(self, config: mc.ModelConfig) -> str:
        return ""

    def gpu_available(self) -> bool:
        return False

    def create_instance(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> StepInstance:
        from .registry import step_factory

        kind = config_parameter(config, STEP_PARAMETER)
        make: Callable[[mc.ModelConfig], StepCompute] = step_factory(kind)
        if not config.input or not config.output:
            raise ModelLoadError(f"vision step '{kind}': declare its inputs and outputs in config.pbtxt")
        try:
            compute = make(config)
        except ModelLoadError as exc:
            raise ModelLoadError(f"vision step '{kind}': {exc.message}") from None
        return StepInstance(spec, _io(config), compute)
