"""Reading and checking ``config.pbtxt``: Triton's config language, parsed by protobuf text format.

Errors name the file, line and field, because a typo in a config is the most common way a model
fails to load and the user must be able to fix it without reading our code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from google.protobuf import json_format, text_format

from ferry_client.codec import datatype_from_config
from ferry_client.codec.messages import message_to_dict
from ferry_client.protocol import model_config_pb2 as mc

from ..errors import ModelLoadError
from ..paths import inside
from ..types import TensorSpec

if TYPE_CHECKING:
    from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

    #: A config's input or output, and a config's list of them (both kinds share the fields used here).
    ConfigTensor: TypeAlias = mc.ModelInput | mc.ModelOutput
    ConfigTensors: TypeAlias = (
        RepeatedCompositeFieldContainer[mc.ModelInput] | RepeatedCompositeFieldContainer[mc.ModelOutput]
    )

CONFIG_FILENAME = "config.pbtxt"
_POSITION_PREFIX = re.compile(r"^\d+:\d+ : ")


def parse_config_text(text: str, source: str) -> mc.ModelConfig:
    """Parse config text; a syntax error or unknown field becomes 'FILE:LINE:COLUMN: what'."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        detail = _POSITION_PREFIX.sub("", str(exc))
        line, column = exc.GetLine(), exc.GetColumn()
        where = f"{source}:{line}:{column}" if line else source
        raise ModelLoadError(f"{where}: {detail}") from None
    return config


def parse_config_json(text: str, source: str) -> mc.ModelConfig:
    """Parse a config given as JSON (the repository load API's ``config`` parameter)."""
    config = mc.ModelConfig()
    try:
        json_format.Parse(text, config)
    except json_format.ParseError as exc:
        raise ModelLoadError(f"{source}: {exc}") from None
    return config


def read_config_file(model_dir: Path) -> mc.ModelConfig | None:
    """The parsed config.pbtxt of a model directory, or None when there is none."""
    path = model_dir / CONFIG_FILENAME
    if not path.is_file():
        return None
    inside(model_dir, CONFIG_FILENAME, "config file")  # a symlinked config must stay in the model directory
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path}: cannot read: {exc}") from None
    return parse_config_text(text, str(path))


def config_to_dict(config: mc.ModelConfig) -> dict:
    """The config as Triton's JSON form: proto field names, enums by name, defaults included,
    64-bit integers as numbers (perf_analyzer reads ``dims`` and delays as numbers)."""
    return message_to_dict(config)


def tensor_specs(tensors: Iterable[ConfigTensor], kind: str, source: str) -> list[TensorSpec]:
    """Turn config inputs or outputs into TensorSpecs, rejecting what the server cannot serve."""
    specs: list[TensorSpec] = []
    seen: set[str] = set()
    for index, tensor in enumerate(tensors):
        where = f"{source}: {kind}[{index}]"
        if not tensor.name:
            raise ModelLoadError(f"{where}: 'name' is required")
        if tensor.name in seen:
            raise ModelLoadError(f"{where}: duplicate {kind} name '{tensor.name}'")
        seen.add(tensor.name)
        type_name = mc.DataType.Name(tensor.data_type)
        if tensor.data_type == mc.TYPE_INVALID:
            raise ModelLoadError(f"{where}: model {kind} '{tensor.name}' must specify 'data_type'")
        try:
            datatype = datatype_from_config(type_name)
        except ValueError as exc:
            raise ModelLoadError(f"{where} '{tensor.name}': {exc}") from None
        if not tensor.dims:
            raise ModelLoadError(f"{where} '{tensor.name}': 'dims' is required")
        if any(d < -1 or d == 0 for d in tensor.dims):
            raise ModelLoadError(f"{where} '{tensor.name}': dims {list(tensor.dims)} must be positive or -1 (variable)")
        reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
        specs.append(
            TensorSpec(
                name=tensor.name,
                datatype=datatype,
                dims=tuple(tensor.dims),
                optional=getattr(tensor, "optional", False),
                label_filename=getattr(tensor, "label_filename", ""),
                reshape=reshape,
            )
        )
    return specs


def validate_config(config: mc.ModelConfig, source: str) -> None:
    """Check the parts of a config the server relies on; raise ModelLoadError naming the field."""
    if config.max_batch_size < 0:
        raise ModelLoadError(f"{source}: max_batch_size must be >= 0, got {config.max_batch_size}")
    if not config.output:
        raise ModelLoadError(f"{source}: the model declares no outputs")
    tensor_specs(config.input, "input", source)
    tensor_specs(config.output, "output", source)
    batching = config.dynamic_batching if config.HasField("dynamic_batching") else None
    if batching is not None:
        if config.max_batch_size == 0 and batching.preferred_batch_size:
            raise ModelLoadError(f"{source}: dynamic_batching needs max_batch_size > 0")
        for size in batching.preferred_batch_size:
            if size <= 0 or size > config.max_batch_size:
                raise ModelLoadError(
                    f"{source}: dynamic_batching.preferred_batch_size {size} must be in "
                    f"1..max_batch_size ({config.max_batch_size})"
                )
        levels = batching.priority_levels  # within its range (ferry/config_ranges.py): each level is a queue
        if batching.default_priority_level > levels:
            raise ModelLoadError(
                f"{source}: dynamic_batching.default_priority_level {batching.default_priority_level} "
                f"exceeds priority_levels {levels}"
            )
        for level in batching.priority_queue_policy:
            if level < 1 or level > levels:
                raise ModelLoadError(
                    f"{source}: dynamic_batching.priority_queue_policy key {level} is not in 1..{levels}"
                )
    for index, group in enumerate(config.instance_group):
        if group.count < 0:
            raise ModelLoadError(f"{source}: instance_group[{index}].count must be >= 0")
        if any(gpu < 0 for gpu in group.gpus):
            raise ModelLoadError(f"{source}: instance_group[{index}].gpus must be >= 0")


def read_labels(model_dir: Path, filename: str) -> list[str]:
    """Labels for a classification output: one per line, in class-index order."""
    path = inside(model_dir, filename, "label_filename")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"cannot read label file {path}: {exc}") from None


def output_labels(model_dir: Path, outputs: Mapping[str, TensorSpec]) -> dict[str, list[str]]:
    """The labels of every output that names a ``label_filename``, by output name."""
    return {spec.name: read_labels(model_dir, spec.label_filename) for spec in outputs.values() if spec.label_filename}
