"""ONNX Runtime backend: provider choice and fallback, warm-up, IO checks — on real sessions."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format

from ferry.backends.base import InstanceSpec
from ferry.backends.onnxruntime import choose_providers
from ferry.errors import ModelLoadError
from ferry.repository.config import read_config_file
from ferry.repository.model import load_version
from ferry_client.protocol import model_config_pb2 as mc

REPO = Path(__file__).resolve().parents[2] / "model_repo"
TRT_CONFIG = """
optimization { execution_accelerators { gpu_execution_accelerator: [
  { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] } }
"""


def test_gpu_instance_without_gpu_providers_fails_clearly(tmp_path: Path) -> None:
    config = text_format.Parse(TRT_CONFIG, mc.ModelConfig(name="m"))
    with pytest.raises(ModelLoadError, match="KIND_GPU but onnxruntime has no GPU execution provider"):
        choose_providers(config, InstanceSpec("g", "GPU"), tmp_path, ["CPUExecutionProvider"])


def test_available_providers_are_used_with_cpu_last(tmp_path: Path, caplog) -> None:
    config = text_format.Parse(TRT_CONFIG, mc.ModelConfig(name="m"))
    caplog.set_level(logging.WARNING)
    chosen = choose_providers(
        config, InstanceSpec("g", "GPU", device_id=1), tmp_path, ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    assert [name for name, _ in chosen] == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert chosen[0][1]["device_id"] == 1
    assert "TensorrtExecutionProvider" in caplog.text  # the missing provider is named in the warning
    full = choose_providers(
        config,
        InstanceSpec("g", "GPU"),
        tmp_path,
        ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
    )
    assert full[0][0] == "TensorrtExecutionProvider"
    assert full[0][1]["trt_fp16_enable"] is True and full[0][1]["trt_engine_cache_path"].endswith("trt_cache")
    assert choose_providers(
        mc.ModelConfig(), InstanceSpec("c", "CPU"), tmp_path, ["CUDAExecutionProvider", "CPUExecutionProvider"]
    ) == [("CPUExecutionProvider", {})]


def _copy(tmp_path: Path, name: str, extra: str) -> tuple[Path, mc.ModelConfig]:
    model_dir = tmp_path / name
    shutil.copytree(REPO / name, model_dir)
    (model_dir / "config.pbtxt").write_text((model_dir / "config.pbtxt").read_text() + extra)
    config = read_config_file(model_dir)
    assert config is not None
    return model_dir, config


def test_warmup_runs_before_ready(tmp_path: Path) -> None:
    warmup = """
model_warmup [ { name: "random" batch_size: 4 count: 3 inputs { key: "INPUT0"
  value { data_type: TYPE_FP32 dims: [16] random_data: true } } inputs { key: "INPUT1"
  value { data_type: TYPE_FP32 dims: [16] zero_data: true } } } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""
    model_dir, config = _copy(tmp_path, "simple_fp32", warmup)
    model = load_version(model_dir, 1, config, "test")
    try:
        assert len(model.instances) == 3  # the file's group of 1 plus this group of 2
    finally:
        model.close()
    broken = (
        '\nmodel_warmup [ { name: "bad" batch_size: 1 inputs { key: "NOPE" value { data_type: TYPE_FP32 '
        "dims: [16] zero_data: true } } } ]\n"
    )
    model_dir, config = _copy(tmp_path / "b", "simple_fp32", broken)
    with pytest.raises(ModelLoadError, match="warmup sample 'bad' failed"):
        load_version(model_dir, 1, config, "test")
