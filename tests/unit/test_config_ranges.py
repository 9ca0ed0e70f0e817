"""Every number of a model config is checked against a sane range at load (issue 38, item 6).

Through the load API's ``config`` override, ``instance_group { count: 100000 }`` kept a load
building instances (RSS 206 -> 3,287 MB, later loads queued behind it), and OCR options of 2^62,
10^9 or NaN loaded. The check runs in ``validate_model_config``, which every load runs on the
config it got, from a file or from an override; these tests feed it the attack's values and the
bundled repositories' real configs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from google.protobuf import json_format, text_format
from google.protobuf.descriptor import Descriptor

from ferry.backends.vision_steps.backend import settings
from ferry.config_ranges import NUMBER_TYPES, RANGES
from ferry.errors import ModelLoadError
from ferry.ocr.settings import RANGES as OCR_RANGES
from ferry.ocr.settings import ocr_settings
from ferry.repository import model, validation
from ferry.repository.config import parse_config_json, read_config_file
from ferry.repository.validation import validate_model_config
from ferry_client.protocol import model_config_pb2 as mc

ROOT = Path(__file__).resolve().parents[2]
#: Fields whose presence fails the load before any range is checked.
REFUSED = {*validation._UNSUPPORTED_FIELDS, *(f"instance_group.{f}" for f in validation._UNSUPPORTED_GROUP_FIELDS)}


def _number_paths(descriptor: Descriptor, prefix: str = "") -> list[str]:
    paths = []
    for field in descriptor.fields:
        path = prefix + field.name
        if path in REFUSED:
            continue
        message = field.message_type
        if message is None:
            if field.type in NUMBER_TYPES:
                paths.append(path)
        elif message.GetOptions().map_entry:
            if message.fields_by_name["key"].type in NUMBER_TYPES:
                paths.append(path + ".key")
            value = message.fields_by_name["value"]
            if value.message_type is not None:
                paths += _number_paths(value.message_type, path + ".")
        elif message is not descriptor:
            paths += _number_paths(message, path + ".")
    return paths


def test_every_number_of_the_schema_has_a_range() -> None:
    paths = _number_paths(mc.ModelConfig.DESCRIPTOR)
    assert "instance_group.count" in paths and "ferry_image.preprocess.limit_side_len" in paths
    assert sorted(set(paths) - set(RANGES)) == []
    assert sorted(set(RANGES) - set(paths)) == []  # no range outlives its field


def _override(config: dict) -> mc.ModelConfig:
    """A config as the load API's ``config`` parameter brings it."""
    return parse_config_json(json.dumps(config), "config parameter for 'quick'")


BASE = {"max_batch_size": 8, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [16]}]}
HOSTILE = [
    ({"instance_group": [{"count": 100000, "kind": "KIND_CPU"}]}, "'instance_group.count' must be within 0..64"),
    ({"instance_group": [{"count": 64, "gpus": [0, 1, 2, 3, 4]}]}, "asks for 320 instances"),
    ({"max_batch_size": 2**31 - 1}, "'max_batch_size' must be within 0..65536, got 2147483647"),
    ({"dynamic_batching": {"max_queue_delay_microseconds": str(2**63)}}, "'dynamic_batching.max_queue_delay_micro"),
    (
        {"dynamic_batching": {"default_queue_policy": {"max_queue_size": 2**32 - 1}}},
        "'dynamic_batching.default_queue_policy.max_queue_size' must be within 0..1000000",
    ),
    (
        {"ferry_image": {"preprocess": {"resize": "LIMIT_SIDE", "limit_side_len": 2**30}}},
        "'ferry_image.preprocess.limit_side_len' must be within 0..16384, got 1073741824",
    ),
    (
        {"ferry_image": {"preprocess": {"resize": "TEXT_LINE", "text_line_max_width": 10**9}}},
        "'ferry_image.preprocess.text_line_max_width' must be within 0..16384",
    ),
    ({"ferry_image": {"preprocess": {"resize_shorter": 2**30}}}, "'ferry_image.preprocess.resize_shorter'"),
    ({"ferry_image": {"detection": {"score_threshold": "NaN"}}}, "'ferry_image.detection.score_threshold' must be"),
    ({"ferry_image": {"preprocess": {"mean": [1.0, "Infinity", 1.0]}}}, "'ferry_image.preprocess.mean' must be"),
    (
        {"model_warmup": [{"name": "w", "batch_size": 8, "inputs": {"x": {"dims": [65536, 65536]}}}]},
        "sample 'w' input 'x' has 34359738368 elements",
    ),
]


@pytest.mark.parametrize(("override", "message"), HOSTILE, ids=[m[:40] for _, m in HOSTILE])
def test_a_number_out_of_range_fails_the_load_naming_field_and_range(override: dict, message: str) -> None:
    with pytest.raises(ModelLoadError, match="^model quick: ") as failure:
        validate_model_config(_override({**BASE, **override}), "quick")
    assert message in failure.value.message


def test_a_config_file_gets_the_same_check(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text(
        'max_batch_size: 8\ninput { name: "x" data_type: TYPE_FP32 dims: [16] }\n'
        "instance_group { count: 100000 kind: KIND_CPU }\n"
    )
    config = read_config_file(tmp_path)
    assert config is not None
    with pytest.raises(ModelLoadError, match=r"'instance_group.count' must be within 0..64, got 100000"):
        validate_model_config(config, "quick")


def _ocr(**parameters: str) -> mc.ModelConfig:
    return json_format.ParseDict(
        {"platform": "ferry_ocr", "parameters": {k: {"string_value": v} for k, v in parameters.items()}},
        mc.ModelConfig(),
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("limit_side_len", str(2**62), "parameters 'limit_side_len' must be within 1..8192, got 4611686018427387904"),
        ("min_side", str(10**9), "parameters 'min_side' must be within 0..4096, got 1000000000"),
        ("box_threshold", "NaN", "parameters 'box_threshold' must be within 0..1, got nan"),
        ("unclip_ratio", "inf", "parameters 'unclip_ratio' must be within 0..16, got inf"),
        ("recognition_batch", "0", "parameters 'recognition_batch' must be within 1..256, got 0"),
    ],
)
def test_ocr_parameters_out_of_range_fail_the_load(key: str, value: str, message: str) -> None:
    with pytest.raises(ModelLoadError) as failure:
        ocr_settings(_ocr(**{key: value}), "ocr/config.pbtxt")
    assert failure.value.message == f"ocr/config.pbtxt: {message}"


def test_every_ocr_number_has_a_range() -> None:
    settings = ocr_settings(_ocr(), "ocr/config.pbtxt")
    numbers = {
        name
        for options in (settings.db, settings.page)
        for name, value in vars(options).items()
        if not isinstance(value, bool)
    }
    assert numbers | {"limit_side_len"} == set(OCR_RANGES)


@pytest.mark.parametrize("repository", ["model_repo", "model_repo_extras", "tests/unit/triton_configs"])
def test_the_bundled_configs_are_within_range(repository: str) -> None:
    configs = sorted((ROOT / repository).rglob("*.pbtxt"))
    assert configs
    for path in configs:
        config = text_format.Parse(path.read_text(), mc.ModelConfig())
        if validation._UNSUPPORTED_FIELDS.keys() & {f.name for f, _ in config.ListFields()}:
            continue  # refused for another reason
        try:
            validate_model_config(config, config.name or path.parent.name)
        except ModelLoadError as exc:
            assert "must be within" not in exc.message and "instances" not in exc.message, (path, exc.message)
        if config.platform == "ferry_ocr":
            ocr_settings(config, str(path))


def test_a_vision_steps_pipeline_parameters_get_the_same_ranges() -> None:
    """An ensemble vision step reads its pipeline messages from ``parameters`` (text format)."""
    config = json_format.ParseDict(
        {"parameters": {"preprocess": {"string_value": "resize: LIMIT_SIDE limit_side_len: 1073741824"}}},
        mc.ModelConfig(),
    )
    with pytest.raises(ModelLoadError) as failure:
        settings(config, "preprocess", mc.FerryPreprocess)
    assert failure.value.message == (
        "parameters 'preprocess': 'ferry_image.preprocess.limit_side_len' must be within 0..16384, got 1073741824"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nan", "parameters 'working_memory_factor' must be within 0..1000, got nan"),
        ("1e9", "parameters 'working_memory_factor' must be within 0..1000, got 1000000000.0"),
        ("-1", "parameters 'working_memory_factor' must be within 0..1000, got -1.0"),
        ("lots", "parameters 'working_memory_factor' must be a number of bytes per input byte, got 'lots'"),
    ],
)
def test_a_working_memory_factor_out_of_range_fails_the_load(value: str, message: str) -> None:
    config = mc.ModelConfig(name="m")
    config.parameters["working_memory_factor"].string_value = value
    with pytest.raises(ModelLoadError, match=re.escape(message)):
        model._working_memory_factor(config, "model 'm'")
    config.parameters["working_memory_factor"].string_value = "14"
    assert model._working_memory_factor(config, "model 'm'") == 14.0
