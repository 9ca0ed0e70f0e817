"""``detection``: a detector's raw outputs -> boxes in original pixels after NMS, padded per image.

The outputs follow the common fixed-size convention (as TensorRT's EfficientNMS): ``num_detections``
[1], ``detection_boxes`` [D, 4] (x1, y1, x2, y2), ``detection_scores`` [D], ``detection_classes`` [D]
(-1 past the count), where D, the dims of ``detection_boxes``, caps the detections per image.
A decoder with keypoints (SSD's ``num_keypoints``) also writes ``detection_keypoints`` [D, K, 2]
when the step declares it, so an ensemble's ``/detect`` carries them.
"""

from __future__ import annotations

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from ...errors import ModelLoadError
from ...pipelines.detection import decode_detections
from ...pipelines.detection_tensors import KEYPOINTS, detection_tensors
from .backend import StepCompute, settings, tensor_dims
from .images import require
from .transforms import TRANSFORM_WIDTH, unpack


def detection_step(config: mc.ModelConfig) -> StepCompute:
    spec = settings(config, "detection", mc.FerryDetection)
    if spec.format == mc.FerryDetection.DBNET:
        raise ModelLoadError(
            "detection.format: DBNET is not available as an ensemble step (its quadrilaterals have no output "
            "here); give the detector ferry_image.detection instead"
        )
    raw = list(spec.outputs) or [t.name for t in config.input if t.name != "TRANSFORM"]
    for name in raw:
        tensor_dims(config, "input", name)
    require(config, "input", "TRANSFORM", "FP64", (TRANSFORM_WIDTH,))
    limit = tensor_dims(config, "output", "detection_boxes")[0]
    if limit < 1:
        raise ModelLoadError("output 'detection_boxes' needs fixed dims [D, 4] (D: detections per image)")
    require(config, "output", "detection_boxes", "FP32", (limit, 4))
    require(config, "output", "detection_scores", "FP32", (limit,))
    require(config, "output", "detection_classes", "INT32", (limit,))
    require(config, "output", "num_detections", "INT32", (1,))
    keypoints = _keypoints(config, spec, limit)
    if spec.max_detections > limit:
        raise ModelLoadError(
            f"detection.max_detections {spec.max_detections} exceeds the {limit} rows of detection_boxes"
        )

    def compute(inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        transforms = unpack(inputs["TRANSFORM"])
        found = decode_detections(inputs, spec, raw, transforms, None, max_detections=spec.max_detections or limit)
        return detection_tensors(found, limit, keypoints)

    return compute


def _keypoints(config: mc.ModelConfig, spec: mc.FerryDetection, limit: int) -> int:
    """The keypoints per detection the step writes: ``num_keypoints`` when the config declares
    ``detection_keypoints`` (FP32 [D, K, 2]), none otherwise."""
    if not any(tensor.name == KEYPOINTS for tensor in config.output):
        return 0
    if not spec.num_keypoints:
        raise ModelLoadError(f"output '{KEYPOINTS}' needs a detection format with keypoints (num_keypoints)")
    require(config, "output", KEYPOINTS, "FP32", (limit, spec.num_keypoints, 2))
    return int(spec.num_keypoints)
