"""GPU paths that need no GPU: TensorRT profiles and engine choice, the TensorRT backend's errors
without TensorRT, and the ONNX Runtime GPU provider options built from a config."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format

from ferry.backends.base import InstanceSpec
from ferry.backends.batch_profile import (
    ShapeRange,
    batch_profile,
    check_config_against_profiles,
    choose_profile,
    profile_option_strings,
)
from ferry.backends.onnxruntime import FixedBindingRunner, choose_providers, input_dims_of
from ferry.backends.tensorrt import engine_file_for
from ferry.errors import InvalidArgument, ModelLoadError
from ferry.repository.config import read_config_file
from ferry.repository.model import load_version
from ferry_client.protocol import model_config_pb2 as mc

REPO = Path(__file__).resolve().parents[2] / "model_repo"
GPU_PROVIDERS = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig(name="m"))


def test_batch_profile_from_max_and_preferred_batch() -> None:
    config = _config("max_batch_size: 32 dynamic_batching { preferred_batch_size: [4, 8] }")
    profile = batch_profile(config, {"input": [3, 224, 224]})
    assert profile["input"] == ShapeRange((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))
    assert batch_profile(_config("max_batch_size: 16"), {"x": [4]})["x"].opt == (16, 4)
    assert batch_profile(_config("max_batch_size: 0"), {"x": [2, 3]})["x"] == ShapeRange((2, 3), (2, 3), (2, 3))
    with pytest.raises(ModelLoadError, match="input 'x' has variable dims"):
        batch_profile(config, {"x": [-1]})
    assert profile_option_strings(profile) == {
        "trt_profile_min_shapes": "input:1x3x224x224",
        "trt_profile_opt_shapes": "input:8x3x224x224",
        "trt_profile_max_shapes": "input:32x3x224x224",
    }


def test_profile_choice_and_config_checks() -> None:
    small = {"x": ShapeRange((1, 4), (2, 4), (4, 4))}
    large = {"x": ShapeRange((1, 4), (16, 4), (32, 4))}
    assert choose_profile([small, large], {"x": (2, 4)}) == 0
    assert choose_profile([small, large], {"x": (12, 4)}) == 1
    assert choose_profile([small, large], {"x": (4, 4)}) == 0  # both fit; opt 2 is nearer than 16
    with pytest.raises(InvalidArgument, match=r"outside the engine's optimization profiles \(x \[1, 4\]\.\.\[4, 4\]"):
        choose_profile([small], {"x": (8, 4)})
    with pytest.raises(InvalidArgument):
        choose_profile([small], {"x": (2, 5)})
    check_config_against_profiles(_config("max_batch_size: 32"), [small, large], "m")
    with pytest.raises(ModelLoadError, match="max_batch_size 64 exceeds the engine's largest profile batch 32"):
        check_config_against_profiles(_config("max_batch_size: 64"), [small, large], "m")
    with pytest.raises(ModelLoadError, match="start at batch 2"):
        check_config_against_profiles(_config("max_batch_size: 8"), [{"x": ShapeRange((2, 4), (4, 4), (8, 4))}], "m")


def test_engine_file_follows_the_compute_capability(tmp_path: Path) -> None:
    (tmp_path / "model_sm90.plan").write_bytes(b"x")
    config = _config('cc_model_filenames { key: "9.0" value: "model_sm90.plan" }')
    default = tmp_path / "model.plan"
    assert engine_file_for(default, config, "9.0") == tmp_path / "model_sm90.plan"
    with pytest.raises(ModelLoadError, match=r"compute capability 8\.6.*9\.0: model_sm90\.plan"):
        engine_file_for(default, config, "8.6")
    default.write_bytes(b"y")
    assert engine_file_for(default, config, "8.6") == default
    config.cc_model_filenames["8.9"] = "missing.plan"
    with pytest.raises(ModelLoadError, match="does not exist"):
        engine_file_for(default, config, "8.9")


def test_tensorrt_model_without_tensorrt_fails_to_load_clearly(tmp_path: Path) -> None:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("TensorRT is installed here; this checks the error without it")
    model_dir = tmp_path / "engine"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model_sm90.plan").write_bytes(b"not an engine")
    (model_dir / "config.pbtxt").write_text(
        'platform: "tensorrt_plan" max_batch_size: 8 cc_model_filenames { key: "9.0" value: "model_sm90.plan" }'
    )
    config = read_config_file(model_dir)
    with pytest.raises(ModelLoadError, match=r"tensorrt_plan needs the tensorrt package.*pip install '\.\[tensorrt\]'"):
        load_version(model_dir, 1, config, "test")
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU)
    with pytest.raises(ModelLoadError, match="TensorRT engines run only on GPUs"):
        load_version(model_dir, 1, config, "test")


def test_tensorrt_ep_gets_profile_shapes_and_caches(tmp_path: Path) -> None:
    config = _config("""max_batch_size: 32 dynamic_batching { preferred_batch_size: [8] }
        optimization { execution_accelerators { gpu_execution_accelerator: [
          { name: "tensorrt" parameters { key: "precision_mode" value: "INT8" } } ] } }""")
    chosen = choose_providers(config, InstanceSpec("g", "GPU"), tmp_path, GPU_PROVIDERS, {"input": [3, 224, 224]})
    name, options = chosen[0]
    assert name == "TensorrtExecutionProvider"
    assert options["trt_int8_enable"] and options["trt_fp16_enable"]
    assert options["trt_profile_opt_shapes"] == "input:8x3x224x224"
    assert options["trt_profile_max_shapes"] == "input:32x3x224x224"
    assert options["trt_timing_cache_path"] == str(tmp_path / "trt_cache")
    explicit = _config("""max_batch_size: 32 optimization { execution_accelerators { gpu_execution_accelerator: [
          { name: "tensorrt" parameters { key: "trt_profile_max_shapes" value: "input:4x3x224x224" } } ] } }""")
    dims = {"input": [3, 224, 224]}
    options = choose_providers(explicit, InstanceSpec("g", "GPU"), tmp_path, GPU_PROVIDERS, dims)[0][1]
    assert options["trt_profile_max_shapes"] == "input:4x3x224x224" and "trt_profile_min_shapes" not in options
    variable = choose_providers(config, InstanceSpec("g", "GPU"), tmp_path, GPU_PROVIDERS, {"input": [3, -1, -1]})
    assert "trt_profile_min_shapes" not in variable[0][1]  # the provider handles variable shapes itself


def test_cuda_ep_options_from_config(tmp_path: Path, caplog) -> None:
    config = _config("""max_batch_size: 0 optimization { cuda { graphs: true } }
        parameters { key: "cudnn_conv_algo_search" value { string_value: "1" } }""")
    chosen = choose_providers(config, InstanceSpec("g", "GPU", device_id=2), tmp_path, GPU_PROVIDERS, {"x": [2, 3]})
    assert chosen[0] == (
        "CUDAExecutionProvider",
        {"device_id": 2, "cudnn_conv_algo_search": "HEURISTIC", "enable_cuda_graph": True},
    )
    batched = _config("max_batch_size: 8 optimization { cuda { graphs: true } }")
    caplog.set_level(logging.WARNING)
    options = choose_providers(batched, InstanceSpec("g", "GPU"), tmp_path, GPU_PROVIDERS, {"x": [3]})[0][1]
    assert "enable_cuda_graph" not in options and "needs static shapes" in caplog.text
    bad = _config('parameters { key: "cudnn_conv_algo_search" value { string_value: "fastest" } }')
    with pytest.raises(ModelLoadError, match="cudnn_conv_algo_search 'fastest'"):
        choose_providers(bad, InstanceSpec("g", "GPU"), tmp_path, GPU_PROVIDERS, {})


def test_input_dims_from_config_or_model(tmp_path: Path) -> None:
    digits = read_config_file(REPO / "digits")
    assert input_dims_of(digits, REPO / "digits" / "1" / "model.onnx") == {"input": [1, 28, 28]}
    bare = mc.ModelConfig(max_batch_size=8)
    assert input_dims_of(bare, REPO / "digits" / "1" / "model.onnx") == {"input": [1, 28, 28]}
    assert input_dims_of(mc.ModelConfig(), REPO / "fixed_nobatch" / "1" / "model.onnx") == {"x": [2, 3]}


def test_fixed_binding_runner_reuses_its_buffers() -> None:
    """The CUDA-graph run path (fixed-address IOBinding), exercised on the CPU device."""
    session = ort.InferenceSession(str(REPO / "fixed_nobatch" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    runner = FixedBindingRunner(session, "cpu", 0)
    for seed in range(3):
        x = np.random.default_rng(seed).random((2, 3), dtype=np.float32)
        out = runner.compute({"x": x}, ["y", "total"])
        np.testing.assert_allclose(out["y"], x * x, rtol=1e-6)
        np.testing.assert_allclose(out["total"], [x.sum()], rtol=1e-5)
    with pytest.raises(InvalidArgument, match="static shape"):
        runner.compute({"x": np.zeros((3, 3), dtype=np.float32)}, ["y"])
