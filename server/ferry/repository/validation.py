"""Triton's model-config rules, checked before anything is loaded.

Every message names the model (never a file path) and the field, in the wording Triton uses where
tools or people grep for it, so a config Triton refuses is refused here too, and a feature Ferry
does not implement fails the load instead of being silently ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from ferry_client.protocol import model_config_pb2 as mc

from ..config_ranges import check_config_ranges
from ..errors import ModelLoadError

if TYPE_CHECKING:
    from .config import ConfigTensor

ENSEMBLE_PLATFORM = "ensemble"

# Fields Ferry does not implement: a config that sets one is refused, naming it.
_UNSUPPORTED_FIELDS = {
    "sequence_batching": "sequence batching (stateful models) is not supported",
    "batch_input": "'batch_input' (ragged batching inputs) is not supported",
    "batch_output": "'batch_output' (ragged batching outputs) is not supported",
    "model_operations": "'model_operations' (custom operation libraries) is not supported",
    "model_repository_agents": "'model_repository_agents' is not supported",
    "model_metrics": "'model_metrics' (custom metric buckets) is not supported",
    "metric_tags": "'metric_tags' (extra metric labels) is not supported",
}
_UNSUPPORTED_TENSOR_FLAGS = {
    "is_shape_tensor": "shape tensors are not supported",
    "allow_ragged_batch": "ragged batching is not supported",
    "is_non_linear_format_io": "non-linear format I/O is not supported",
}
_UNSUPPORTED_GROUP_FIELDS = {
    "rate_limiter": "'rate_limiter' is not supported",
    "secondary_devices": "'secondary_devices' is not supported",
    "profile": "'profile' (TensorRT optimization profile selection) is not supported",
    "passive": "'passive' instances are not supported",
    "host_policy": "'host_policy' is not supported",
}


def _fail(message: str) -> None:
    raise ModelLoadError(message)


def _is_set(message: Message, field: str) -> bool:
    """True when a message field, repeated field or scalar differs from its default."""
    descriptor = message.DESCRIPTOR.fields_by_name[field]
    if descriptor.message_type is not None and descriptor.has_presence:
        return message.HasField(field)
    return bool(len(getattr(message, field)) if descriptor.message_type is not None else getattr(message, field))


def validate_model_config(config: mc.ModelConfig, model_name: str) -> None:
    """Apply Triton's load-time checks (and Ferry's refusals) to a config, before autocomplete.

    ``model_name`` is the repository directory name; the config's ``name``, when given, must match.
    """
    if config.name and config.name != model_name:
        _fail(
            f"unexpected directory name '{model_name}' for model '{config.name}', "
            "directory name must equal model name (or leave 'name' out of the configuration)"
        )
    if config.max_batch_size < 0:
        _fail(f"'max_batch_size' must be non-negative value for {model_name}")
    _check_unsupported(config, model_name)
    _check_tensors(config.input, "input", config.max_batch_size, model_name)
    _check_tensors(config.output, "output", config.max_batch_size, model_name)
    _check_version_policy(config.version_policy, model_name)
    _check_instance_groups(config, model_name)
    if config.HasField("dynamic_batching"):
        _check_dynamic_batching(config.dynamic_batching, config.max_batch_size, model_name)
    check_config_ranges(config, model_name)  # after the refusals: fields Ferry refuses have no ranges


def _check_unsupported(config: mc.ModelConfig, model_name: str) -> None:
    if config.platform == ENSEMBLE_PLATFORM and not config.HasField("ensemble_scheduling"):
        _fail(f"ensemble scheduling must be set for ensemble {model_name} whose platform is ensemble")
    if config.HasField("ensemble_scheduling") and config.platform != ENSEMBLE_PLATFORM:
        _fail(f"ensemble scheduling can not be set for model {model_name} whose platform is not ensemble")
    for field, why in _UNSUPPORTED_FIELDS.items():
        if _is_set(config, field):
            _fail(f"{why} for {model_name}: remove '{field}' from its configuration")
    if config.model_transaction_policy.decoupled and "python" not in (config.backend, config.platform):
        _fail(
            f'decoupled models are supported only for python models (backend: "python"), not for '
            f"{model_name}: remove 'model_transaction_policy {{ decoupled: true }}' (an ensemble is decoupled "
            "when one of its steps is)"
        )
    if config.runtime:
        _fail(f"'runtime' '{config.runtime}' is not supported for {model_name}")


def _check_tensors(tensors: Iterable, kind: str, max_batch_size: int, model_name: str) -> None:
    for tensor in tensors:
        label = f"model {kind} '{tensor.name}'"
        if not tensor.name:
            _fail(f"model {kind} must specify 'name' for {model_name}")
        if tensor.dims and any(d < -1 or d == 0 for d in tensor.dims):
            _fail(
                f"{label} dimension must be integer >= 1, or -1 to indicate a variable-size dimension "
                f"for {model_name}, got dims {list(tensor.dims)}"
            )
        layout = getattr(tensor, "format", mc.ModelInput.FORMAT_NONE)
        if layout != mc.ModelInput.FORMAT_NONE and tensor.dims and len(tensor.dims) != 3:
            _fail(f"{label}: model input NHWC/NCHW require 3 dims for {model_name}, got {list(tensor.dims)}")
        for flag, why in _UNSUPPORTED_TENSOR_FLAGS.items():
            if getattr(tensor, flag, False):
                _fail(f"{label}: {why} for {model_name}: remove '{flag}'")
        if tensor.HasField("reshape"):
            _check_reshape(tensor, kind, max_batch_size, model_name)


def _check_reshape(tensor: ConfigTensor, kind: str, max_batch_size: int, model_name: str) -> None:
    """Triton's reshape rules: no scalar without batching, valid dims, and element counts that
    agree between every pair of variable-size dimensions."""
    dims, shape = list(tensor.dims), list(tensor.reshape.shape)
    label = f"model {kind} '{tensor.name}'"
    if not shape and max_batch_size == 0:
        _fail(
            f"{label} cannot have empty reshape for non-batching model as scalar tensors are not "
            f"supported for {model_name}"
        )
    if any(d < -1 or d == 0 for d in shape):
        _fail(
            f"{label} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size "
            f"dimension for {model_name}, got {shape}"
        )
    dims_segments, shape_segments = _fixed_segments(dims), _fixed_segments(shape)
    if len(dims_segments) != len(shape_segments):
        _fail(
            f"{label} has different number of variable-size dimensions for dims and reshape for "
            f"{model_name}: dims {dims}, reshape {shape}"
        )
    if dims_segments != shape_segments:
        _fail(
            f"model {kind} has different size for dims and reshape for {model_name}: "
            f"'{tensor.name}' dims {dims}, reshape {shape}"
        )


def _fixed_segments(dims: Sequence[int]) -> list[int]:
    """Element counts of the fixed-size runs between variable-size (-1) dimensions."""
    segments: list[int] = []
    current: list[int] = []
    for d in dims:
        if d == -1:
            segments.append(math.prod(current))
            current = []
        else:
            current.append(d)
    segments.append(math.prod(current))
    return segments


def _check_version_policy(policy: mc.ModelVersionPolicy, model_name: str) -> None:
    choice = policy.WhichOneof("policy_choice")
    if choice == "latest" and policy.latest.num_versions < 1:
        _fail(f"version_policy latest num_versions must be >= 1 for {model_name}")
    if choice == "specific":
        if not policy.specific.versions:
            _fail(f"version_policy specific must list at least one version for {model_name}")
        if any(v < 0 for v in policy.specific.versions):
            _fail(f"version_policy specific versions must be >= 0 for {model_name}")


def _check_instance_groups(config: mc.ModelConfig, model_name: str) -> None:
    kinds = mc.ModelInstanceGroup
    for index, group in enumerate(config.instance_group):
        group_name = group.name or f"{model_name}_{index}"
        where = f"instance group {group_name} of model {model_name}"
        if group.count < 0:
            _fail(f"{where} must specify 'count' >= 1, got {group.count}")
        if group.kind == kinds.KIND_CPU and group.gpus:
            _fail(f"{where} has kind KIND_CPU but specifies one or more GPUs")
        if group.kind == kinds.KIND_MODEL and group.gpus:
            _fail(f"{where} has kind KIND_MODEL but specifies one or more GPUs")
        for gpu in group.gpus:
            if gpu < 0:
                _fail(f"{where} specifies invalid or unsupported gpu id of {gpu}")
        for field, why in _UNSUPPORTED_GROUP_FIELDS.items():
            if _is_set(group, field):
                _fail(f"{where}: {why}")


def _check_dynamic_batching(batching: mc.ModelDynamicBatching, max_batch_size: int, model_name: str) -> None:
    for size in batching.preferred_batch_size:
        if size < 1:
            _fail(f"dynamic batching preferred size must be positive for {model_name}")
        if size > max_batch_size:
            _fail(
                f"dynamic batching preferred size must be <= max batch size for {model_name} "
                f"(preferred_batch_size {size}, max_batch_size {max_batch_size})"
            )
    levels = batching.priority_levels
    if levels > 0:
        if not 1 <= batching.default_priority_level <= levels:
            _fail(f"default priority level must be in range [1, {levels}] for {model_name}")
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                _fail(f"priority queue policy must have priority level in range [1, {levels}] for {model_name}")
    elif batching.default_priority_level or batching.priority_queue_policy:
        _fail(f"default priority level and priority queue policy need 'priority_levels' > 0 for {model_name}")
    if batching.preserve_ordering:
        if levels > 1:
            _fail(f"Only one priority level is allowed when 'preserve_ordering' is true for {model_name}")
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        if any(p.timeout_action == mc.ModelQueuePolicy.DELAY and p.default_timeout_microseconds for p in policies):
            _fail(
                f"Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {model_name}"
            )
