"""Writing an optimized model into the repository: a new model directory or a new version.

A new model (the default, ``<model>_<precision>``) leaves the FP32 model untouched, so both can be
served side by side and compared; a new version replaces what the version policy serves. Files
are staged in a temporary directory next to the destination and moved in place only after the
accuracy check passed, so a refused or failed run leaves the repository as it was.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format

from ferry_client.protocol import model_config_pb2 as mc

from ..repository.config import CONFIG_FILENAME
from .calibration import OptimizeError

_GROUP = mc.ModelInstanceGroup


@dataclass(frozen=True)
class Target:
    """Where the optimized model goes and what it is."""

    precision: str  # "fp16" or "int8"
    engine: str  # "onnxruntime" or "tensorrt"
    fp16_io: bool = False

    @property
    def platform(self) -> str:
        return "tensorrt_plan" if self.engine == "tensorrt" else "onnxruntime_onnx"


def default_output_name(model_name: str, target: Target) -> str:
    suffix = target.precision if target.engine == "onnxruntime" else f"trt_{target.precision}"
    return f"{model_name}_{suffix}"


def derived_config(
    source: mc.ModelConfig,
    name: str,
    target: Target,
    model_filename: str | None = None,
    compute_capability: str | None = None,
) -> mc.ModelConfig:
    """The optimized model's config: the source's, renamed, with platform, devices and types adjusted.

    FP16 and TensorRT models are for GPUs: CPU instance groups become KIND_AUTO (GPU when there is
    one) for FP16 ONNX and KIND_GPU for TensorRT engines. An engine's file is recorded per compute
    capability in ``cc_model_filenames``, because an engine runs only on the GPU generation it
    was built for.
    """
    config = mc.ModelConfig.FromString(source.SerializeToString())
    config.name = name
    config.platform = target.platform
    config.backend = ""
    if target.engine == "tensorrt":
        config.ClearField("default_model_filename")
        if model_filename and compute_capability:
            config.cc_model_filenames[compute_capability] = model_filename
        config.optimization.ClearField("execution_accelerators")
        for group in config.instance_group:
            group.kind = _GROUP.KIND_GPU
    elif target.precision == "fp16":
        for group in config.instance_group:
            if group.kind == _GROUP.KIND_CPU:
                group.kind = _GROUP.KIND_AUTO
    if target.fp16_io:
        tensors: list[mc.ModelInput | mc.ModelOutput] = [*config.input, *config.output]
        for tensor in tensors:
            if tensor.data_type == mc.TYPE_FP32:
                tensor.data_type = mc.TYPE_FP16
        if config.HasField("ferry_image") and config.ferry_image.preprocess.data_type == mc.TYPE_FP32:
            config.ferry_image.preprocess.data_type = mc.TYPE_FP16
    return config


def config_text(config: mc.ModelConfig, header: list[str]) -> str:
    """config.pbtxt text with ``header`` lines as comments on top."""
    comments = "".join(f"# {line}\n" for line in header)
    return comments + text_format.MessageToString(config)


def copy_model_files(source_dir: Path, config: mc.ModelConfig, destination: Path) -> None:
    """Copy what the config refers to besides the model file: label files and warm-up data."""
    for output in config.output:
        if output.label_filename:
            src = source_dir / output.label_filename
            (destination / output.label_filename).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, destination / output.label_filename)
    if (source_dir / "warmup").is_dir():
        shutil.copytree(source_dir / "warmup", destination / "warmup", dirs_exist_ok=True)


def stage_model(
    staging: Path, source_dir: Path, config: mc.ModelConfig, header: list[str], version: int, files: dict[str, Path]
) -> Path:
    """Lay out a complete model directory under ``staging``: config, labels, ``<version>/<files>``."""
    model_dir = staging / config.name
    (model_dir / str(version)).mkdir(parents=True)
    (model_dir / CONFIG_FILENAME).write_text(config_text(config, header))
    copy_model_files(source_dir, config, model_dir)
    for filename, path in files.items():
        shutil.move(str(path), model_dir / str(version) / filename)
    return model_dir


def install_model(staged: Path, destination: Path, overwrite: bool) -> None:
    """Move a staged model directory to ``destination`` (replacing it only when ``overwrite``)."""
    if destination.exists():
        if not overwrite:
            raise OptimizeError(f"{destination} exists; pass --overwrite or choose --output-name")
        shutil.rmtree(destination)
    shutil.move(str(staged), destination)


def install_version(staged: Path, version: int, model_dir: Path) -> None:
    """Move a staged version directory into an existing model directory."""
    target = model_dir / str(version)
    if target.exists():
        raise OptimizeError(f"{target} exists; choose another --as-version")
    shutil.move(str(staged / str(version)), target)
