"""Triton's Python backend (``backend: "python"``): ``model.py`` files run as models, if allowed.

The repository becomes code here, so nothing loads unless the server was started with
``--allow-python-models``. Each instance runs in the server's process by default, or in a child
process of its own with ``parameters { key: "FERRY_ISOLATION" value { string_value: "process" } }``.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format

from ferry_client.codec import datatype_from_config
from ferry_client.codec.messages import message_to_dict
from ferry_client.protocol import model_config_pb2 as mc

from ...errors import ModelLoadError, Unavailable
from ..base import Backend, InstanceSpec, ModelIO, TensorInfo, config_parameter
from .host import ALLOW_OPTION, HOST
from .inprocess import InProcessInstance
from .instance import PythonInstance
from .isolated import IsolatedInstance
from .runner import ModelLoadFailure

ISOLATION_PARAMETER = "FERRY_ISOLATION"
ISOLATION_MODES = ("none", "process")
#: Triton parameters of the Python backend that Ferry does not honour: refused, never ignored.
UNSUPPORTED_PARAMETERS = {
    "EXECUTION_ENV_PATH": "custom Python environments (Ferry runs models with the server's own interpreter)",
}
CPU_ONLY_PARAMETER = "FORCE_CPU_ONLY_INPUT_TENSORS"  # "no" asks for GPU inputs, which Ferry never gives


class PythonBackend(Backend):
    platform = "python"
    name = "python"
    default_filename = "model.py"
    request_batches = True  # execute(requests) answers each request of a batch on its own

    def gpu_available(self) -> bool:
        return False  # KIND_AUTO means CPU; a KIND_GPU group still loads (the model decides what it does)

    def create_instance(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> PythonInstance:
        if not HOST.allowed:
            raise Unavailable(
                f"python models are disabled: model.py is code, and this server runs none from its repository; "
                f"start it with {ALLOW_OPTION} to serve '{config.name}'"
            )
        _refuse_unsupported(config)
        isolation = _isolation(config)
        version_dir = model_file.parent
        args = {
            "model_instance_kind": spec.kind,
            "model_instance_name": spec.name,
            "model_instance_device_id": str(spec.device_id),
            "model_repository": str(version_dir.parent),
            "model_version": version_dir.name,
            "model_name": config.name,
        }
        if isolation == "process" and config.model_transaction_policy.decoupled:
            raise ModelLoadError(
                f"parameter {ISOLATION_PARAMETER}: a decoupled model runs in the server's process; "
                "'process' isolation is not supported for it"
            )
        kind = IsolatedInstance if isolation == "process" else InProcessInstance
        try:
            instance = kind(model_file, message_to_dict(config), args, spec)
        except ModelLoadFailure as exc:
            raise ModelLoadError(str(exc)) from None
        try:
            _merge_completed(config, instance.config)
            _refuse_unsupported(config)
            instance.io = io_from_config(config)
        except BaseException:
            instance.close()
            raise
        return instance


def _isolation(config: mc.ModelConfig) -> str:
    mode = (config_parameter(config, ISOLATION_PARAMETER) or "none").lower()
    if mode not in ISOLATION_MODES:
        raise ModelLoadError(
            f"parameter {ISOLATION_PARAMETER} is '{mode}'; expected one of: {', '.join(ISOLATION_MODES)}"
        )
    return mode


def _merge_completed(config: mc.ModelConfig, completed: dict) -> None:
    """Take what ``auto_complete_config`` added into the version's config."""
    try:
        merged = json_format.ParseDict(completed, mc.ModelConfig())
    except json_format.ParseError as exc:
        raise ModelLoadError(f"auto_complete_config produced an invalid config: {exc}") from None
    config.CopyFrom(merged)


def _refuse_unsupported(config: mc.ModelConfig) -> None:
    for key, what in UNSUPPORTED_PARAMETERS.items():
        if key in config.parameters:
            raise ModelLoadError(f"parameter {key} is not supported: {what}")
    if (config_parameter(config, CPU_ONLY_PARAMETER) or "yes").lower() in ("no", "false", "off", "0"):
        raise ModelLoadError(
            f"parameter {CPU_ONLY_PARAMETER}: 'no' is not supported: inputs are always numpy arrays on the CPU"
        )


def io_from_config(config: mc.ModelConfig) -> ModelIO:
    """A Python model's tensors are what its config (after auto-complete) declares."""
    batch = (None,) if config.max_batch_size > 0 else ()

    def info(tensor: mc.ModelInput | mc.ModelOutput) -> TensorInfo:
        if tensor.data_type == mc.TYPE_INVALID or not tensor.dims:
            raise ModelLoadError(
                f"tensor '{tensor.name}': a python model's config (or its auto_complete_config) "
                "must give 'data_type' and 'dims'"
            )
        datatype = datatype_from_config(mc.DataType.Name(tensor.data_type))
        dims = tuple(None if d == -1 else d for d in tensor.dims)
        return TensorInfo(tensor.name, datatype, (*batch, *dims), engine_type="python")

    return ModelIO([info(t) for t in config.input], [info(t) for t in config.output])
