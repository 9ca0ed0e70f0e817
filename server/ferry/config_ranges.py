"""Sane ranges for the numbers a model config carries, checked when it loads.

A config reaches the server from the repository or from any caller of the load API (its ``config``
parameter), so a number is as hostile as a request body: ``instance_group { count: 100000 }`` kept
a load building instances for ever (3 GB and counting), an OCR ``limit_side_len`` of 2^62 or a NaN
threshold loaded and waited for the first page. Every number is checked against a range, the same
way wherever the config came from, and refused with a message naming the field and the range; NaN
is outside every range.

``RANGES`` has an entry for every numeric field of the schema (tests/unit/test_config_ranges.py
walks it), except those under fields Ferry refuses outright (``repository/validation.py`` fails the
load first). The bounds are far above what a real model uses and far below what would exhaust the
server: counts of things the load builds (instances, queues, warm-up runs), sizes of buffers it
allocates (image sides, warm-up tensors), delays and timeouts the event loop can schedule,
probabilities in 0..1. It lives beneath the repository because ensemble vision steps read pipeline
messages from their ``parameters`` and check them here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from ferry_client.protocol import model_config_pb2 as mc

from .errors import ModelLoadError


@dataclass(frozen=True)
class Range:
    """The inclusive range ``low..high`` one number must be in."""

    low: float
    high: float

    def check(self, value: float, field: str, where: str) -> None:
        """Refuse ``value`` (``field`` of ``where``) unless it is within the range (NaN never is)."""
        if not self.low <= value <= self.high:
            raise ModelLoadError(f"{where}: {field} must be within {_text(self.low)}..{_text(self.high)}, got {value}")


def _text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


_INT64 = 2**63 - 1
#: A tensor dimension (-1: variable) and an image side in pixels.
_DIM, _SIDE = Range(-1, 2**31 - 1), Range(0, 16384)
_PROBABILITY, _BATCH, _COUNT = Range(0, 1), Range(0, 65536), Range(0, 1_000_000)
#: Delays and timeouts in microseconds: at most an hour.
_MICROSECONDS = Range(0, 3_600_000_000)
#: Instances one model may build, over all its groups (``count`` x GPUs listed).
MAX_INSTANCES = 256
#: Elements of one warm-up input (its dims times its batch): what the load allocates per sample.
MAX_WARMUP_ELEMENTS = 2**28
#: A model's ``working_memory_factor`` parameter: bytes its engine holds while it runs, per byte of
#: input (ONNX Runtime's PP-OCR models hold 10-25; a factor past this range is a typo).
WORKING_MEMORY_RANGE = Range(0, 1000)

RANGES: dict[str, Range] = {
    "version_policy.latest.num_versions": Range(1, 1000),
    "version_policy.specific.versions": Range(0, _INT64),  # a directory name, looked up, never allocated
    "max_batch_size": _BATCH,
    "input.dims": _DIM,
    "input.reshape.shape": _DIM,
    "output.dims": _DIM,
    "output.reshape.shape": _DIM,
    "optimization.graph.level": Range(-1, 2),
    "optimization.cuda.graph_spec.batch_size": _BATCH,
    "optimization.cuda.graph_spec.input.dim": Range(-1, 65536),  # captured: allocated per graph
    "optimization.cuda.graph_spec.graph_lower_bound.batch_size": _BATCH,
    "optimization.cuda.graph_spec.graph_lower_bound.input.dim": Range(-1, 65536),
    "optimization.gather_kernel_buffer_threshold": Range(0, 2**32 - 1),  # not read by Ferry
    "dynamic_batching.preferred_batch_size": Range(1, 65536),
    "dynamic_batching.max_queue_delay_microseconds": _MICROSECONDS,
    "dynamic_batching.priority_levels": Range(0, 1024),  # each level is a queue
    "dynamic_batching.default_priority_level": Range(0, 1024),
    "dynamic_batching.default_queue_policy.default_timeout_microseconds": _MICROSECONDS,
    "dynamic_batching.default_queue_policy.max_queue_size": _COUNT,
    "dynamic_batching.priority_queue_policy.key": Range(1, 1024),
    "dynamic_batching.priority_queue_policy.default_timeout_microseconds": _MICROSECONDS,
    "dynamic_batching.priority_queue_policy.max_queue_size": _COUNT,
    # looked up, never allocated; -1 or a version is checked naming the step (ensembles/plan.py)
    "ensemble_scheduling.step.model_version": Range(-_INT64 - 1, _INT64),
    "ensemble_scheduling.max_inflight_requests": _COUNT,
    "instance_group.count": Range(0, 64),
    "instance_group.gpus": Range(0, 1023),
    "model_warmup.batch_size": _BATCH,
    "model_warmup.inputs.dims": Range(1, MAX_WARMUP_ELEMENTS),
    "model_warmup.count": Range(0, 1000),
    "ferry_image.preprocess.scale": Range(-1e6, 1e6),
    "ferry_image.preprocess.mean": Range(-1e6, 1e6),
    "ferry_image.preprocess.std": Range(-1e6, 1e6),
    "ferry_image.preprocess.pad_value": Range(0, 255),
    "ferry_image.preprocess.resize_shorter": _SIDE,
    "ferry_image.preprocess.max_pixels": Range(0, 1_000_000_000),
    "ferry_image.preprocess.limit_side_len": _SIDE,
    "ferry_image.preprocess.size_multiple": Range(0, 1024),
    "ferry_image.preprocess.text_line_min_width": _SIDE,
    "ferry_image.preprocess.text_line_max_width": _SIDE,
    "ferry_image.classification.top_k": _BATCH,
    "ferry_image.detection.score_threshold": _PROBABILITY,
    "ferry_image.detection.iou_threshold": _PROBABILITY,
    "ferry_image.detection.max_detections": _COUNT,
    "ferry_image.detection.strides": Range(1, 4096),
    "ferry_image.detection.anchors.num_layers": Range(0, 64),
    "ferry_image.detection.anchors.min_scale": Range(0, 100),
    "ferry_image.detection.anchors.max_scale": Range(0, 100),
    "ferry_image.detection.anchors.anchor_offset_x": _PROBABILITY,
    "ferry_image.detection.anchors.anchor_offset_y": _PROBABILITY,
    "ferry_image.detection.anchors.strides": Range(1, 4096),
    "ferry_image.detection.anchors.aspect_ratios": Range(0, 1000),
    "ferry_image.detection.anchors.interpolated_scale_aspect_ratio": Range(0, 1000),
    "ferry_image.detection.box_coder.x_scale": Range(0, 1e6),
    "ferry_image.detection.box_coder.y_scale": Range(0, 1e6),
    "ferry_image.detection.box_coder.w_scale": Range(0, 1e6),
    "ferry_image.detection.box_coder.h_scale": Range(0, 1e6),
    "ferry_image.detection.num_keypoints": Range(0, 1024),
    "ferry_image.detection.top_k_per_level": _COUNT,
    "ferry_image.detection.dbnet.binarize_threshold": _PROBABILITY,
    "ferry_image.detection.dbnet.unclip_ratio": Range(0, 16),
    "ferry_image.detection.dbnet.max_candidates": _COUNT,
}

NUMBER_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_FLOAT,
        FieldDescriptor.TYPE_DOUBLE,
    }
)


def check_config_ranges(config: mc.ModelConfig, model_name: str) -> None:
    """Refuse a config with a number outside its range, naming the field and the range."""
    where = f"model {model_name}"
    check_message_ranges(config, "", where)
    instances = sum(group.count * max(1, len(group.gpus)) for group in config.instance_group)
    if instances > MAX_INSTANCES:
        raise ModelLoadError(
            f"{where}: 'instance_group' asks for {instances} instances ('count' times the GPUs listed, over "
            f"every group); at most {MAX_INSTANCES}"
        )
    for sample in config.model_warmup:
        for name, tensor in sample.inputs.items():
            elements = math.prod(tensor.dims) * max(1, sample.batch_size)
            if elements > MAX_WARMUP_ELEMENTS:
                raise ModelLoadError(
                    f"{where}: 'model_warmup' sample '{sample.name}' input '{name}' has {elements} elements "
                    f"(dims times batch_size); at most {MAX_WARMUP_ELEMENTS}"
                )


def check_message_ranges(message: Message, prefix: str, where: str) -> None:
    """Refuse a number of ``message`` (found at ``prefix`` in a config) outside its range."""
    for field, value in message.ListFields():
        path = prefix + field.name
        if field.message_type is None:
            if field.type in NUMBER_TYPES:
                values = value if field.is_repeated else (value,)
                for number in values:
                    RANGES[path].check(number, f"'{path}'", where)
        elif field.message_type.GetOptions().map_entry:
            _check_map(field, value, path, where)
        elif field.is_repeated:
            for item in value:
                check_message_ranges(item, path + ".", where)
        else:
            check_message_ranges(value, path + ".", where)


def _check_map(field: FieldDescriptor, entries: dict, path: str, where: str) -> None:
    key_type = field.message_type.fields_by_name["key"].type
    value_field = field.message_type.fields_by_name["value"]
    for key, value in entries.items():
        if key_type in NUMBER_TYPES:
            RANGES[path + ".key"].check(key, f"'{path}' key", where)
        if value_field.message_type is not None:
            check_message_ranges(value, path + ".", where)
