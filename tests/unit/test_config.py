"""config.pbtxt parsing: real Triton configs parse; broken ones fail naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.backends.base import ModelIO, TensorInfo
from ferry.errors import ModelLoadError
from ferry.repository.autocomplete import complete_config
from ferry.repository.config import config_to_dict, parse_config_text, tensor_specs, validate_config
from ferry.repository.versions import select_versions
from ferry_client.protocol import model_config_pb2 as mc

CONFIGS = Path(__file__).parent / "triton_configs"
REPO = Path(__file__).resolve().parents[2] / "model_repo"


def parse(text: str) -> mc.ModelConfig:
    return parse_config_text(text, "config.pbtxt")


def test_full_triton_config_parses() -> None:
    config = parse((CONFIGS / "resnet50_onnx.pbtxt").read_text())
    validate_config(config, "resnet50")
    assert config.max_batch_size == 32
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.dynamic_batching.default_queue_policy.timeout_action == mc.ModelQueuePolicy.REJECT
    assert config.dynamic_batching.priority_queue_policy[2].max_queue_size == 8
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == "FP16"
    assert config.model_warmup[0].inputs["input"].zero_data
    assert config.parameters["intra_op_thread_count"].string_value == "4"
    as_json = config_to_dict(config)
    assert as_json["dynamic_batching"]["max_queue_delay_microseconds"] == 100  # a number, as Triton writes it
    assert as_json["input"][0]["dims"] == [3, 224, 224]


def test_backend_style_config_parses() -> None:
    config = parse((CONFIGS / "densenet_backend.pbtxt").read_text())
    validate_config(config, "densenet")
    spec = tensor_specs(config.input, "input", "densenet")[0]
    assert spec.reshape == (1, 3, 224, 224) and spec.datatype == "FP32"


def test_every_bundled_config_parses() -> None:
    configs = sorted(REPO.glob("*/config.pbtxt"))
    assert len(configs) >= 5
    for path in configs:
        validate_config(parse_config_text(path.read_text(), str(path)), str(path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'name: "m"\nmax_batch_sise: 4\n',
            'config.pbtxt:2:1: Message type "inference.ModelConfig" has no field named "max_batch_sise"',
        ),
        ('name: "m"\ninput [ { name: "x" data_type: TYPE_FLOAT32 dims: [1] } ]\n', "config.pbtxt:2:"),
        ('name: "m"\nmax_batch_size: "eight"\n', "config.pbtxt:2:"),
        ('name: "m"\ninput [ { name: "x" \n', "config.pbtxt:"),
    ],
)
def test_syntax_errors_name_file_line_and_field(text: str, expected: str) -> None:
    with pytest.raises(ModelLoadError) as info:
        parse(text)
    assert expected in info.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'max_batch_size: -1 input [{name: "x" data_type: TYPE_FP32 dims: [1]}] output [{name: "y" '
            "data_type: TYPE_FP32 dims: [1]}]",
            "max_batch_size must be >= 0",
        ),
        (
            'input [{name: "x" dims: [1]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
            "input[0]: model input 'x' must specify 'data_type'",
        ),
        (
            'input [{name: "x" data_type: TYPE_FP32 dims: [0]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
            "must be positive or -1",
        ),
        (
            'max_batch_size: 4 input [{name: "x" data_type: TYPE_FP32 dims: [1]}] output [{name: "y" '
            "data_type: TYPE_FP32 dims: [1]}] dynamic_batching { preferred_batch_size: [8] }",
            "preferred_batch_size 8 must be in 1..max_batch_size (4)",
        ),
        (
            'input [{name: "x" data_type: TYPE_FP32 dims: [1]}, {name: "x" data_type: TYPE_FP32 dims: [1]}] '
            'output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
            "duplicate input name 'x'",
        ),
    ],
)
def test_semantic_errors_are_precise(text: str, expected: str) -> None:
    with pytest.raises(ModelLoadError) as info:
        validate_config(parse(text), "config.pbtxt")
    assert expected in info.value.message


MODEL_IO = ModelIO(
    inputs=[TensorInfo("x", "FP32", (None, 3, 8)), TensorInfo("ids", "INT64", (None, None))],
    outputs=[TensorInfo("y", "FP32", (None, 10))],
)


def test_autocomplete_fills_a_missing_config() -> None:
    config = mc.ModelConfig()
    complete_config(config, MODEL_IO, "m")
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in config.input] == [("x", [3, 8]), ("ids", [-1])]
    assert config.input[1].data_type == mc.TYPE_INT64
    assert [(t.name, list(t.dims)) for t in config.output] == [("y", [10])]


def test_autocomplete_fills_a_partial_config_and_checks_it() -> None:
    config = parse('max_batch_size: 2 input [{name: "x"}]')
    complete_config(config, MODEL_IO, "m")
    assert config.input[0].data_type == mc.TYPE_FP32 and list(config.input[0].dims) == [3, 8]
    assert {t.name for t in config.input} == {"x", "ids"}
    bad_type = parse('max_batch_size: 2 input [{name: "x" data_type: TYPE_INT32}]')
    with pytest.raises(ModelLoadError, match="'x' is TYPE_INT32 in the config but TYPE_FP32 in the model"):
        complete_config(bad_type, MODEL_IO, "m")
    bad_name = parse('max_batch_size: 2 input [{name: "z"}]')
    with pytest.raises(ModelLoadError, match=r"input 'z' is not an input of the model \(the model's inputs: x, ids\)"):
        complete_config(bad_name, MODEL_IO, "m")
    fixed = ModelIO(inputs=[TensorInfo("x", "FP32", (1, 3))], outputs=[TensorInfo("y", "FP32", (1, 3))])
    with pytest.raises(ModelLoadError, match="needs a variable first"):
        complete_config(parse("max_batch_size: 8"), fixed, "m")


def test_version_policies() -> None:
    available = [1, 2, 5, 7]
    assert select_versions(mc.ModelVersionPolicy(), available) == [7]
    assert select_versions(parse("version_policy { latest { num_versions: 2 } }").version_policy, available) == [5, 7]
    assert select_versions(parse("version_policy { all {} }").version_policy, available) == available
    specific = parse("version_policy { specific { versions: [2, 9] } }").version_policy
    assert select_versions(specific, available) == [2]
