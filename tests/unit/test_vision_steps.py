"""Vision steps on their own: the geometry they hand on, their crops and top-k, and the load
errors of a wrong step config (loaded through the real model manager)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ferry.backends.vision_steps.backend import VisionStepBackend
from ferry.backends.vision_steps.crops import cut
from ferry.backends.vision_steps.transforms import pack, unpack
from ferry.errors import ModelLoadError
from ferry.pipelines.preprocess import ImageTransform
from ferry.repository.config import parse_config_text
from ferry.repository.manager import ControlMode, ModelManager

from ..ensembles.cascade import add_cascade


def test_transforms_travel_exactly() -> None:
    transforms = [ImageTransform(0.2, 0.25, 3.5, 0.0, 640, 480, 128, 128), ImageTransform(1.0, 1.0, 0, 0, 7, 9, 7, 9)]
    assert unpack(pack(transforms)) == transforms


def test_cut_keeps_at_least_a_pixel_inside_the_image() -> None:
    image = Image.new("RGB", (20, 10))
    assert cut(image, np.array([2.4, 3.6, 7.1, 8.0])).size == (6, 5)  # pixels 2..7 x 3..7
    assert cut(image, np.array([-5.0, -5.0, 50.0, 50.0])).size == (20, 10)
    assert cut(image, np.array([19.5, 9.5, 19.5, 9.5])).size == (1, 1)


def _instance(text: str):
    config = parse_config_text(text, "config.pbtxt")
    from ferry.backends import InstanceSpec

    return VisionStepBackend().create_instance(Path("."), config, InstanceSpec("x", "CPU"))


def test_classification_step_returns_top_k_of_the_softmax() -> None:
    step = _instance(
        'name: "top" backend: "ferry_vision" max_batch_size: 4 '
        'input [ { name: "LOGITS" data_type: TYPE_FP32 dims: [ 4 ] } ] '
        'output [ { name: "CLASS_IDS" data_type: TYPE_INT32 dims: [ 2 ] }, '
        '{ name: "SCORES" data_type: TYPE_FP32 dims: [ 2 ] } ] '
        'parameters [ { key: "step" value { string_value: "classification" } }, '
        '{ key: "classification" value { string_value: "softmax: true" } } ]'
    )
    logits = np.array([[0.0, 2.0, 1.0, -1.0], [5.0, 5.0, 0.0, 0.0]], np.float32)
    out = step.compute({"LOGITS": logits}, ["CLASS_IDS", "SCORES"])
    assert out["CLASS_IDS"].tolist() == [[1, 2], [0, 1]]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["SCORES"], np.sort(exp / exp.sum(axis=1, keepdims=True), axis=1)[:, ::-1][:, :2])
    empty = step.compute({"LOGITS": np.zeros((0, 4), np.float32)}, ["CLASS_IDS", "SCORES"])
    assert empty["CLASS_IDS"].shape == (0, 2)


CROP = (
    'name: "crops" backend: "ferry_vision" max_batch_size: {mbs} '
    'input [ {{ name: "IMAGE" data_type: TYPE_STRING dims: [ -1, 1 ] }}, '
    '{{ name: "detection_boxes" data_type: TYPE_FP32 dims: [ -1, 5, 4 ] }}, '
    '{{ name: "num_detections" data_type: TYPE_INT32 dims: [ -1, 1 ] }} ] '
    'output [ {{ name: "CROPS" data_type: TYPE_FP32 dims: [ -1, 1, 8, 8 ] }}, '
    '{{ name: "CROP_IMAGE_INDEX" data_type: TYPE_INT32 dims: [ -1, 1 ] }} ] '
    'parameters [ {{ key: "step" value {{ string_value: "{kind}" }} }}, '
    '{{ key: "preprocess" value {{ string_value: "{pre}" }} }} ]'
)
GRAY = "color_order: GRAY layout: NCHW resize: EXACT"
DETECTIONS = (
    'name: "crops" backend: "ferry_vision" max_batch_size: 4 '
    'input [ { name: "output0" data_type: TYPE_FP32 dims: [ 14, 320 ] }, '
    '{ name: "TRANSFORM" data_type: TYPE_FP64 dims: [ 8 ] } ] '
    'output [ { name: "num_detections" data_type: TYPE_INT32 dims: [ 1 ] }, '
    '{ name: "detection_boxes" data_type: TYPE_FP32 dims: [ 5, 4 ] }, '
    '{ name: "detection_scores" data_type: TYPE_FP32 dims: [ 5 ] }, '
    '{ name: "detection_classes" data_type: TYPE_INT32 dims: [ 5 ] }, '
    '{ name: "detection_keypoints" data_type: TYPE_FP32 dims: [ 5, 6, 2 ] } ] '
    'parameters [ { key: "step" value { string_value: "detection" } }, '
    '{ key: "detection" value { string_value: "format: YOLOV8" } } ]'
)

BAD_STEPS = {
    "unknown kind": (
        CROP.format(mbs=0, kind="blur", pre=GRAY),
        "parameters 'step': unknown vision step 'blur' (known: decode_preprocess, detection, crop, classification)",
    ),
    "batched crop": (
        CROP.format(mbs=8, kind="crop", pre=GRAY),
        "vision step 'crop': the crop step returns a row per detection, not per image: set max_batch_size: 0",
    ),
    "bad settings": (
        CROP.format(mbs=0, kind="crop", pre="colour: GRAY"),
        "vision step 'crop': parameters 'preprocess': 1:1 : Message type \"inference.FerryPreprocess\" has no "
        'field named "colour".',
    ),
    "gpu preprocess": (
        CROP.format(mbs=0, kind="crop", pre=GRAY + " device: GPU"),
        "vision step 'crop': parameters 'preprocess': device: GPU is not supported in a vision step (CPU only)",
    ),
    "missing tensor": (
        CROP.format(mbs=0, kind="crop", pre=GRAY).replace('"CROP_IMAGE_INDEX"', '"INDEX"'),
        "vision step 'crop': needs output 'CROP_IMAGE_INDEX' (declared: CROPS, INDEX)",
    ),
    "keypoints without a keypoint format": (
        DETECTIONS,
        "vision step 'detection': output 'detection_keypoints' needs a detection format with keypoints (num_keypoints)",
    ),
    "wrong type": (
        CROP.format(mbs=0, kind="crop", pre=GRAY).replace("TYPE_STRING", "TYPE_UINT8"),
        "vision step 'crop': input 'IMAGE' must be BYTES with dims [-1, 1], got UINT8 with dims [-1, 1]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_STEPS))
def test_a_wrong_step_config_fails_its_load(tmp_path: Path, case: str) -> None:
    config, message = BAD_STEPS[case]
    (tmp_path / "crops" / "1").mkdir(parents=True)
    (tmp_path / "crops" / "config.pbtxt").write_text(config)

    async def run() -> str:
        manager = ModelManager(tmp_path, ControlMode.EXPLICIT)
        await manager.start()
        try:
            with pytest.raises(ModelLoadError):
                await manager.load("crops")
            return manager.index()[0]["reason"]
        finally:
            await manager.stop()

    assert asyncio.run(run()) == message


def test_every_cascade_step_loads(tmp_path: Path) -> None:
    add_cascade(tmp_path)

    async def run() -> list[dict[str, str]]:
        manager = ModelManager(tmp_path, ControlMode.EXPLICIT, ["digit_cascade"])
        await manager.start()
        try:
            return manager.index()
        finally:
            await manager.stop()

    assert {row["name"]: row["state"] for row in asyncio.run(run())} == dict.fromkeys(
        ["digit_boxes", "digit_cascade", "digit_crops", "digit_detector", "digit_preprocess", "digit_top", "digits"],
        "READY",
    )
