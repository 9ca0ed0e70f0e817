"""Tests for the protocol definitions in protos/ and their generated modules.

What is checked:

* the committed ``ferry_client/protocol/*_pb2*`` files are exactly what
  ``protos/generate.py`` produces from ``protos/*.proto``;
* every message, enum, field and rpc Triton defines exists in Ferry's
  definitions with the same name, number and type (wire compatibility with
  tritonclient), and Ferry's only additions are in its reserved range;
* messages built by tritonclient parse with Ferry's classes and vice versa;
* tritonclient and ferry_client.protocol can be imported in one process in
  either order (Ferry uses a private descriptor pool);
* Ferry's image-pipeline additions parse from config.pbtxt text.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor, descriptor_pool, text_format, unknown_fields

from ferry_client.protocol import POOL, grpc_service_pb2, grpc_service_pb2_grpc, model_config_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO_ROOT / "protos"
PROTOCOL_DIR = REPO_ROOT / "clients" / "python" / "ferry_client" / "protocol"

# Field numbers from this value upwards in inference.ModelConfig are Ferry's.
FERRY_FIELD_RANGE_START = 1000
#: Triton messages Ferry extends, only with fields numbered from FERRY_FIELD_RANGE_START.
FERRY_EXTENDED_MESSAGES = frozenset({"inference.ModelConfig", "inference.ModelMetadataResponse"})

# Messages that exist only in Ferry (no Triton counterpart).
FERRY_ONLY_MESSAGES = {
    "inference.FerryImagePipeline",
    "inference.FerryPreprocess",
    "inference.FerryClassification",
    "inference.FerryDetection",
    "inference.FerryEmbedding",
    "inference.FerryTextRecognition",
    # the map entry of ModelMetadataResponse.parameters (field 1000)
    "inference.ModelMetadataResponse.ParametersEntry",
}


def _load_generate_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ferry_protos_generate", PROTO_DIR / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _triton_modules() -> tuple[ModuleType, ModuleType]:
    """tritonclient's generated modules, or skip when tritonclient is absent."""
    pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    from tritonclient.grpc import model_config_pb2 as triton_config
    from tritonclient.grpc import service_pb2 as triton_service

    return triton_service, triton_config


# ---------------------------------------------------------------------------
# (a) generated files are up to date
# ---------------------------------------------------------------------------


def test_generated_files_match_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed; cannot regenerate the protocol modules")
    generate = _load_generate_script()
    written = generate.generate(tmp_path)

    assert sorted(p.name for p in written) == sorted(generate.GENERATED_FILES)
    stale = [p.name for p in written if p.read_bytes() != (PROTOCOL_DIR / p.name).read_bytes()]
    assert not stale, f"regenerate with `python protos/generate.py`; stale files: {stale}"


def test_check_mode_detects_stale_files(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed; cannot regenerate the protocol modules")
    generate = _load_generate_script()
    generate.generate(tmp_path)
    assert generate.main(["--check", "--out", str(tmp_path)]) == 0

    target = tmp_path / "grpc_service_pb2.py"
    target.write_text(target.read_text(encoding="utf-8") + "# edited by hand\n", encoding="utf-8")
    (tmp_path / "model_config_pb2.pyi").unlink()
    problems = generate.check(tmp_path)
    assert any(p.startswith("grpc_service_pb2.py: differs") for p in problems)
    assert "model_config_pb2.pyi: missing" in problems
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1


def test_generated_modules_use_private_pool_and_relative_imports() -> None:
    for name in ("model_config_pb2.py", "grpc_service_pb2.py"):
        text = (PROTOCOL_DIR / name).read_text(encoding="utf-8")
        assert "_descriptor_pool.Default()" not in text, name
        assert "from . import _pool" in text, name
    for name in ("grpc_service_pb2.py", "grpc_service_pb2_grpc.py", "grpc_service_pb2.pyi"):
        text = (PROTOCOL_DIR / name).read_text(encoding="utf-8")
        assert "\nimport model_config_pb2" not in text
        assert "\nimport grpc_service_pb2" not in text

    assert model_config_pb2.DESCRIPTOR.pool is POOL
    assert grpc_service_pb2.DESCRIPTOR.pool is POOL
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("inference.FerryImagePipeline")


# ---------------------------------------------------------------------------
# (b) descriptor-level compatibility with Triton
# ---------------------------------------------------------------------------


def _walk_messages(
    containers: Iterator[descriptor.Descriptor],
) -> Iterator[descriptor.Descriptor]:
    for message in containers:
        yield message
        yield from _walk_messages(iter(message.nested_types))


def _all_messages(file: descriptor.FileDescriptor) -> dict[str, descriptor.Descriptor]:
    return {m.full_name: m for m in _walk_messages(iter(file.message_types_by_name.values()))}


def _all_enums(file: descriptor.FileDescriptor) -> dict[str, descriptor.EnumDescriptor]:
    enums = {e.full_name: e for e in file.enum_types_by_name.values()}
    for message in _all_messages(file).values():
        enums.update({e.full_name: e for e in message.enum_types})
    return enums


def _field_signature(field: descriptor.FieldDescriptor) -> tuple[object, ...]:
    return (
        field.name,
        field.number,
        field.type,
        field.is_repeated,
        field.has_presence,
        field.message_type.full_name if field.message_type else None,
        field.enum_type.full_name if field.enum_type else None,
        field.containing_oneof.name if field.containing_oneof else None,
    )


def _file_pairs() -> list[tuple[descriptor.FileDescriptor, descriptor.FileDescriptor]]:
    triton_service, triton_config = _triton_modules()
    return [
        (triton_config.DESCRIPTOR, model_config_pb2.DESCRIPTOR),
        (triton_service.DESCRIPTOR, grpc_service_pb2.DESCRIPTOR),
    ]


@pytest.mark.parametrize("which", ["model_config.proto", "grpc_service.proto"])
def test_messages_match_triton(which: str) -> None:
    theirs_file, ours_file = {t.name: (t, o) for t, o in _file_pairs()}[which]
    assert ours_file.name == theirs_file.name
    assert ours_file.package == theirs_file.package == "inference"

    theirs = _all_messages(theirs_file)
    ours = _all_messages(ours_file)

    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"messages missing from Ferry's {which}: {missing}"

    problems: list[str] = []
    for full_name, their_msg in theirs.items():
        our_msg = ours[full_name]
        if their_msg.GetOptions().map_entry != our_msg.GetOptions().map_entry:
            problems.append(f"{full_name}: map-entry mismatch")
        their_fields = {f.number: f for f in their_msg.fields}
        our_fields = {f.number: f for f in our_msg.fields}
        for number, their_field in their_fields.items():
            our_field = our_fields.get(number)
            if our_field is None:
                problems.append(f"{full_name}: field {their_field.name} = {number} missing")
            elif _field_signature(our_field) != _field_signature(their_field):
                problems.append(
                    f"{full_name}.{their_field.name}: ours {_field_signature(our_field)} "
                    f"!= Triton {_field_signature(their_field)}"
                )
        for number, our_field in our_fields.items():
            if number in their_fields:
                continue
            if full_name in FERRY_EXTENDED_MESSAGES and number >= FERRY_FIELD_RANGE_START:
                continue
            problems.append(f"{full_name}: extra field {our_field.name} = {number} outside Ferry's reserved range")
        their_oneofs = sorted(o.name for o in their_msg.oneofs)
        our_oneofs = sorted(o.name for o in our_msg.oneofs)
        if their_oneofs != our_oneofs:
            problems.append(f"{full_name}: oneofs {our_oneofs} != Triton {their_oneofs}")
    assert not problems, "\n".join(problems)

    extra_messages = set(ours) - set(theirs)
    ferry_prefixes = tuple(f"{name}." for name in FERRY_ONLY_MESSAGES)
    unexpected = sorted(m for m in extra_messages if m not in FERRY_ONLY_MESSAGES and not m.startswith(ferry_prefixes))
    assert not unexpected, f"messages in Ferry's {which} that Triton lacks: {unexpected}"


@pytest.mark.parametrize("which", ["model_config.proto", "grpc_service.proto"])
def test_enums_match_triton(which: str) -> None:
    theirs_file, ours_file = {t.name: (t, o) for t, o in _file_pairs()}[which]
    theirs = _all_enums(theirs_file)
    ours = _all_enums(ours_file)
    for full_name, their_enum in theirs.items():
        assert full_name in ours, f"enum {full_name} missing"
        their_values = {v.name: v.number for v in their_enum.values}
        our_values = {v.name: v.number for v in ours[full_name].values}
        assert our_values == their_values, full_name


def test_service_matches_triton() -> None:
    triton_service, _ = _triton_modules()
    theirs = triton_service.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    ours = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert ours.full_name == theirs.full_name == "inference.GRPCInferenceService"

    def signature(method: descriptor.MethodDescriptor) -> tuple[object, ...]:
        return (
            method.input_type.full_name,
            method.output_type.full_name,
            method.client_streaming,
            method.server_streaming,
        )

    their_methods = {m.name: signature(m) for m in theirs.methods}
    our_methods = {m.name: signature(m) for m in ours.methods}
    assert our_methods == their_methods

    stream = our_methods["ModelStreamInfer"]
    assert stream == ("inference.ModelInferRequest", "inference.ModelStreamInferResponse", True, True)
    assert hasattr(grpc_service_pb2_grpc, "GRPCInferenceServiceStub")
    assert hasattr(grpc_service_pb2_grpc, "GRPCInferenceServiceServicer")
    assert hasattr(grpc_service_pb2_grpc, "add_GRPCInferenceServiceServicer_to_server")


def test_ferry_additions_are_in_reserved_range() -> None:
    config_fields = model_config_pb2.ModelConfig.DESCRIPTOR.fields_by_name
    ferry_image = config_fields["ferry_image"]
    assert ferry_image.number == 1000
    assert ferry_image.message_type.full_name == "inference.FerryImagePipeline"

    pipeline = model_config_pb2.FerryImagePipeline.DESCRIPTOR
    assert {f.name: f.number for f in pipeline.fields} == {
        "preprocess": 1,
        "classification": 2,
        "detection": 3,
        "input": 4,
        "embedding": 5,
        "text_recognition": 6,
    }
    preprocess = model_config_pb2.FerryPreprocess.DESCRIPTOR
    assert {f.name: f.number for f in preprocess.fields} == {
        "color_order": 1,
        "layout": 2,
        "data_type": 3,
        "resize": 4,
        "interpolation": 5,
        "scale": 6,
        "mean": 7,
        "std": 8,
        "pad_value": 9,
        "letterbox_corner": 10,
        "resize_shorter": 11,
        "max_pixels": 12,
        "device": 13,
        "resize_engine": 14,
        "crop_rounding": 15,
        "resize_shorter_rounding": 16,
        "pad_then_resize": 17,
        "draft_decode": 18,
        "resize_alignment": 19,
        "letterbox_rounding": 20,
        "letterbox_mapping": 21,
        "limit_side_len": 22,
        "limit_type": 23,
        "size_multiple": 24,
        "text_line_min_width": 25,
        "text_line_max_width": 26,
        "pad_to_batch": 27,
        "decode": 28,
    }
    assert preprocess.fields_by_name["data_type"].enum_type.full_name == "inference.DataType"
    assert {f.name: f.number for f in model_config_pb2.FerryClassification.DESCRIPTOR.fields} == {
        "softmax": 1,
        "top_k": 2,
        "output": 3,
    }
    assert {f.name: f.number for f in model_config_pb2.FerryDetection.DESCRIPTOR.fields} == {
        "format": 1,
        "score_threshold": 2,
        "iou_threshold": 3,
        "class_agnostic_nms": 4,
        "max_detections": 5,
        "outputs": 6,
        "box_format": 7,
        "strides": 8,
        "anchors": 9,
        "box_coder": 10,
        "num_keypoints": 11,
        "score_activation": 12,
        "suppression": 13,
        "top_k_per_level": 14,
        "multi_label": 15,
        "clip_boxes": 16,
        "nms_plus_one_area": 17,
        "dbnet": 18,
    }
    assert {f.name: f.number for f in model_config_pb2.FerryEmbedding.DESCRIPTOR.fields} == {
        "output": 1,
        "pooling": 2,
        "l2_normalize": 3,
    }
    assert {f.name: f.number for f in model_config_pb2.FerryTextRecognition.DESCRIPTOR.fields} == {"output": 1}
    assert {f.name: f.number for f in model_config_pb2.FerryDetection.DbNet.DESCRIPTOR.fields} == {
        "binarize_threshold": 1,
        "unclip_ratio": 2,
        "max_candidates": 3,
        "dilation": 4,
        "score_mode": 5,
        "reading_order": 6,
    }

    def values(enum: descriptor.EnumDescriptor) -> dict[str, int]:
        return {v.name: v.number for v in enum.values}

    enums = preprocess.enum_types_by_name
    assert values(enums["ColorOrder"]) == {"RGB": 0, "BGR": 1, "GRAY": 2}
    assert values(enums["Layout"]) == {"NCHW": 0, "NHWC": 1}
    assert values(enums["ResizeMode"]) == {
        "EXACT": 0,
        "SHORTER_SIDE_CENTER_CROP": 1,
        "LETTERBOX": 2,
        "LIMIT_SIDE": 3,
        "TEXT_LINE": 4,
    }
    assert values(enums["LimitType"]) == {"LIMIT_MIN": 0, "LIMIT_MAX": 1}
    assert values(enums["Interpolation"]) == {"BILINEAR": 0, "NEAREST": 1, "BICUBIC": 2, "LANCZOS": 3, "AREA": 4}
    assert values(enums["ResizeEngine"]) == {"ENGINE_DEFAULT": 0, "OPENCV": 1, "PILLOW": 2}
    assert values(enums["CropRounding"]) == {"CROP_ROUND": 0, "CROP_FLOOR": 1}
    assert values(enums["SideRounding"]) == {"SIDE_INT": 0, "SIDE_ROUND": 1}
    det_enums = model_config_pb2.FerryDetection.DESCRIPTOR.enum_types_by_name
    assert values(det_enums["DetectionFormat"]) == {
        "YOLOV8": 0,
        "YOLOV5": 1,
        "BOXES_SCORES_CLASSES": 2,
        "YOLOX": 3,
        "SSD": 4,
        "DFL": 5,
        "DETR": 6,
        "END_TO_END": 7,
        "DBNET": 8,
    }
    assert values(det_enums["BoxFormat"]) == {"XYWH_CENTER": 0, "XYXY": 1}
    assert values(enums["LetterboxMapping"]) == {
        "LETTERBOX_MAPPING_DEFAULT": 0,
        "PER_AXIS": 1,
        "LETTERBOX_GAIN": 2,
        "LETTERBOX_GAIN_APPLIED_PADDING": 3,
    }
    db_enums = model_config_pb2.FerryDetection.DbNet.DESCRIPTOR.enum_types_by_name
    assert values(db_enums["ReadingOrder"]) == {"CONTOUR_ORDER": 0, "NEIGHBOUR_SWAP": 1, "LINE_GROUPS": 2}


# ---------------------------------------------------------------------------
# (c) wire round trips against tritonclient's classes
# ---------------------------------------------------------------------------


def _fill_params(params: object) -> None:
    """Put one value of every InferParameter kind into a parameters map."""
    params["flag"].bool_param = True  # type: ignore[index]
    params["count"].int64_param = -(2**40)  # type: ignore[index]
    params["label"].string_param = "héllo"  # type: ignore[index]
    params["ratio"].double_param = 0.125  # type: ignore[index]
    params["big"].uint64_param = 2**64 - 1  # type: ignore[index]


def _assert_params(params: object) -> None:
    assert params["flag"].WhichOneof("parameter_choice") == "bool_param"  # type: ignore[index]
    assert params["flag"].bool_param is True  # type: ignore[index]
    assert params["count"].int64_param == -(2**40)  # type: ignore[index]
    assert params["label"].string_param == "héllo"  # type: ignore[index]
    assert params["ratio"].double_param == 0.125  # type: ignore[index]
    assert params["big"].WhichOneof("parameter_choice") == "uint64_param"  # type: ignore[index]
    assert params["big"].uint64_param == 2**64 - 1  # type: ignore[index]


def test_infer_request_from_tritonclient_parses_in_ferry() -> None:
    triton_service, _ = _triton_modules()
    request = triton_service.ModelInferRequest(model_name="resnet", model_version="3", id="req-1")
    _fill_params(request.parameters)
    image = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 3, 2, 2])
    image.parameters["binary_data_size"].int64_param = 48
    labels = request.inputs.add(name="TEXT", datatype="BYTES", shape=[2])
    labels.contents.bytes_contents.extend([b"cat", b"dog"])
    out = request.outputs.add(name="OUTPUT0")
    out.parameters["classification"].int64_param = 5
    request.raw_input_contents.append(bytes(range(48)))

    wire = request.SerializeToString(deterministic=True)
    ours = grpc_service_pb2.ModelInferRequest.FromString(wire)

    assert (ours.model_name, ours.model_version, ours.id) == ("resnet", "3", "req-1")
    _assert_params(ours.parameters)
    assert [i.name for i in ours.inputs] == ["INPUT0", "TEXT"]
    assert ours.inputs[0].datatype == "FP32"
    assert list(ours.inputs[0].shape) == [1, 3, 2, 2]
    assert ours.inputs[0].parameters["binary_data_size"].int64_param == 48
    assert not ours.inputs[0].HasField("contents")
    assert list(ours.inputs[1].contents.bytes_contents) == [b"cat", b"dog"]
    assert ours.outputs[0].name == "OUTPUT0"
    assert ours.outputs[0].parameters["classification"].int64_param == 5
    assert list(ours.raw_input_contents) == [bytes(range(48))]
    assert len(unknown_fields.UnknownFieldSet(ours)) == 0
    assert ours.SerializeToString(deterministic=True) == wire


def test_infer_response_from_ferry_parses_in_tritonclient() -> None:
    triton_service, _ = _triton_modules()
    response = grpc_service_pb2.ModelInferResponse(model_name="yolo", model_version="1", id="abc")
    _fill_params(response.parameters)
    boxes = response.outputs.add(name="boxes", datatype="FP32", shape=[1, 2, 4])
    boxes.parameters["binary_data_size"].int64_param = 32
    scores = response.outputs.add(name="scores", datatype="FP64", shape=[2])
    scores.contents.fp64_contents.extend([0.5, 0.25])
    classes = response.outputs.add(name="classes", datatype="INT32", shape=[2])
    classes.contents.int_contents.extend([-1, 7])
    response.raw_output_contents.append(b"\x00" * 32)

    wire = response.SerializeToString(deterministic=True)
    theirs = triton_service.ModelInferResponse.FromString(wire)

    assert (theirs.model_name, theirs.model_version, theirs.id) == ("yolo", "1", "abc")
    _assert_params(theirs.parameters)
    assert [o.name for o in theirs.outputs] == ["boxes", "scores", "classes"]
    assert list(theirs.outputs[0].shape) == [1, 2, 4]
    assert theirs.outputs[0].parameters["binary_data_size"].int64_param == 32
    assert list(theirs.outputs[1].contents.fp64_contents) == [0.5, 0.25]
    assert list(theirs.outputs[2].contents.int_contents) == [-1, 7]
    assert list(theirs.raw_output_contents) == [b"\x00" * 32]
    assert theirs.SerializeToString(deterministic=True) == wire

    stream = grpc_service_pb2.ModelStreamInferResponse(error_message="", infer_response=response)
    their_stream = triton_service.ModelStreamInferResponse.FromString(stream.SerializeToString())
    assert their_stream.infer_response.outputs[2].contents.int_contents == [-1, 7]


def test_repository_load_request_round_trip() -> None:
    triton_service, _ = _triton_modules()
    theirs = triton_service.RepositoryModelLoadRequest(repository_name="", model_name="detector")
    theirs.parameters["config"].string_param = '{"max_batch_size": 8}'
    theirs.parameters["file:1/model.onnx"].bytes_param = b"\x08\x07onnx"
    theirs.parameters["poll"].bool_param = False
    theirs.parameters["retries"].int64_param = -3

    ours = grpc_service_pb2.RepositoryModelLoadRequest.FromString(theirs.SerializeToString())
    assert ours.model_name == "detector"
    assert ours.parameters["config"].string_param == '{"max_batch_size": 8}'
    assert ours.parameters["file:1/model.onnx"].bytes_param == b"\x08\x07onnx"
    assert ours.parameters["poll"].WhichOneof("parameter_choice") == "bool_param"
    assert ours.parameters["retries"].int64_param == -3

    back = triton_service.RepositoryModelLoadRequest.FromString(ours.SerializeToString())
    assert back == theirs


TRITON_STYLE_CONFIG = """
name: "resnet50"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 8
version_policy { latest { num_versions: 2 } }
input [
  {
    name: "input"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
    reshape { shape: [ 1, 3, 224, 224 ] }
  }
]
output [
  { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "labels.txt" }
]
instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 }
  priority_queue_policy { key: 1 value { max_queue_size: 16 } }
}
optimization {
  execution_accelerators {
    gpu_execution_accelerator [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ]
  }
  input_pinned_memory { enable: true }
}
parameters { key: "intra_op_thread_count" value { string_value: "4" } }
model_warmup [
  {
    name: "zeros"
    batch_size: 1
    inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 3, 224, 224 ] zero_data: true } }
  }
]
response_cache { enable: true }
cc_model_filenames { key: "8.0" value: "model_a100.plan" }
metric_tags { key: "team" value: "vision" }
default_model_filename: "model.onnx"
"""


def test_triton_config_parses_identically_in_both() -> None:
    _, triton_config = _triton_modules()
    theirs = text_format.Parse(TRITON_STYLE_CONFIG, triton_config.ModelConfig())
    ours = text_format.Parse(TRITON_STYLE_CONFIG, model_config_pb2.ModelConfig())

    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    assert ours.dynamic_batching.priority_queue_policy[1].max_queue_size == 16
    accelerator = ours.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert accelerator.parameters["precision_mode"] == "FP16"
    assert ours.model_warmup[0].inputs["input"].WhichOneof("input_data_type") == "zero_data"

    # A config response from Ferry is readable by tritonclient, and Ferry's
    # additions are simply unknown fields to it.
    ours.ferry_image.classification.top_k = 5
    response = grpc_service_pb2.ModelConfigResponse(config=ours)
    triton_service, _ = _triton_modules()
    parsed = triton_service.ModelConfigResponse.FromString(response.SerializeToString())
    assert parsed.config.name == "resnet50"
    assert parsed.config.dynamic_batching.preferred_batch_size == [4, 8]


# ---------------------------------------------------------------------------
# (d) both packages importable in one process
# ---------------------------------------------------------------------------


def test_tritonclient_and_ferry_coexist_in_process() -> None:
    triton_service, triton_config = _triton_modules()
    assert triton_service.DESCRIPTOR.pool is not grpc_service_pb2.DESCRIPTOR.pool
    assert triton_config.DESCRIPTOR.pool is not model_config_pb2.DESCRIPTOR.pool
    assert triton_service.ModelInferRequest is not grpc_service_pb2.ModelInferRequest
    found = POOL.FindMessageTypeByName("inference.ModelInferRequest")
    assert found is grpc_service_pb2.ModelInferRequest.DESCRIPTOR


@pytest.mark.parametrize("order", ["triton_first", "ferry_first"])
def test_import_order_does_not_matter(order: str) -> None:
    pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    imports = ["import tritonclient.grpc", "import ferry_client.protocol"]
    if order == "ferry_first":
        imports.reverse()
    code = textwrap.dedent(
        f"""
        {imports[0]}
        {imports[1]}
        from ferry_client.protocol import grpc_service_pb2
        from tritonclient.grpc import service_pb2
        r = grpc_service_pb2.ModelInferRequest(model_name="m")
        assert service_pb2.ModelInferRequest.FromString(r.SerializeToString()).model_name == "m"
        print("ok")
        """
    )
    env = dict(os.environ)
    client_path = str(REPO_ROOT / "clients" / "python")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (client_path, env.get("PYTHONPATH")) if p)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# ---------------------------------------------------------------------------
# (e) Ferry additions in config.pbtxt
# ---------------------------------------------------------------------------


def test_ferry_image_pipeline_parses_from_text() -> None:
    snippet = """
    name: "detector"
    ferry_image {
      preprocess { resize: LETTERBOX mean: [0.5, 0.5, 0.5] }
      detection { format: YOLOV8 }
    }
    """
    config = text_format.Parse(snippet, model_config_pb2.ModelConfig())

    assert config.HasField("ferry_image")
    pipeline = config.ferry_image
    assert pipeline.preprocess.resize == model_config_pb2.FerryPreprocess.LETTERBOX
    assert list(pipeline.preprocess.mean) == [0.5, 0.5, 0.5]
    assert pipeline.HasField("detection")
    assert pipeline.detection.format == model_config_pb2.FerryDetection.YOLOV8
    assert not pipeline.HasField("classification")
    # Defaults documented in model_config.proto.
    assert pipeline.preprocess.data_type == model_config_pb2.TYPE_INVALID
    assert pipeline.preprocess.scale == 0.0
    assert pipeline.input == ""


def test_ferry_image_pipeline_full_text_round_trip() -> None:
    snippet = """
    ferry_image {
      input: "images"
      preprocess {
        color_order: BGR
        layout: NHWC
        data_type: TYPE_FP16
        resize: SHORTER_SIDE_CENTER_CROP
        interpolation: LANCZOS
        scale: 1.0
        mean: [123.675, 116.28, 103.53]
        std: [58.395, 57.12, 57.375]
        pad_value: 114
        letterbox_corner: true
        resize_shorter: 256
        max_pixels: 100000000
      }
      classification { softmax: true top_k: 5 output: "logits" }
      detection {
        format: BOXES_SCORES_CLASSES
        score_threshold: 0.25
        iou_threshold: 0.45
        class_agnostic_nms: true
        max_detections: 300
        outputs: ["boxes", "scores", "classes"]
        box_format: XYXY
      }
    }
    """
    config = text_format.Parse(snippet, model_config_pb2.ModelConfig())
    again = text_format.Parse(text_format.MessageToString(config), model_config_pb2.ModelConfig())
    assert again == config
    pre = config.ferry_image.preprocess
    assert pre.color_order == model_config_pb2.FerryPreprocess.BGR
    assert pre.layout == model_config_pb2.FerryPreprocess.NHWC
    assert pre.interpolation == model_config_pb2.FerryPreprocess.LANCZOS
    assert pre.max_pixels == 100_000_000
    assert list(config.ferry_image.detection.outputs) == ["boxes", "scores", "classes"]
    assert config.ferry_image.detection.box_format == model_config_pb2.FerryDetection.XYXY
