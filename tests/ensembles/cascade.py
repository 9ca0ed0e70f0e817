"""A detect-then-classify cascade from the bundled models: ``digit_detector`` finds digits in a
scene, every found digit is cropped and classified by ``digits``, all in one ensemble request.
``add_face_landmarks`` builds a detect-with-landmarks ensemble from ``face_detector`` (MediaPipe's
BlazeFace: a box and six keypoints per face).

Vision steps do the glue: decode + letterbox, YOLOv8 decode + NMS, crop + resize, top-k.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..conftest import MODEL_REPO
from .repo import add_ensemble, scheduling, step

MAX_DETECTIONS = 20
TOP_K = 3


def _pipeline_settings(model: str, part: str, **changes: object) -> str:
    """A bundled model's own ``ferry_image`` settings (with ``changes``) as one line of text format,
    so the vision steps process exactly as the model's image pipeline does."""
    from google.protobuf import text_format

    from ferry.repository.config import read_config_file

    config = read_config_file(MODEL_REPO / model)
    assert config is not None
    settings = getattr(config.ferry_image, part)
    for field, value in changes.items():
        setattr(settings, field, value)
    # single quotes: the text goes inside a double-quoted string_value
    return text_format.MessageToString(settings, as_one_line=True).replace('"', "'")


DETECTOR_PREPROCESS = _pipeline_settings("digit_detector", "preprocess")
DIGIT_PREPROCESS = _pipeline_settings("digits", "preprocess")
DETECTION = _pipeline_settings("digit_detector", "detection", max_detections=MAX_DETECTIONS)


def _vision(repo: Path, name: str, kind: str, max_batch_size: int, io: str, **settings: str) -> None:
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    parameters = [f'{{ key: "step" value {{ string_value: "{kind}" }} }}'] + [
        f'{{ key: "{key}" value {{ string_value: "{value}" }} }}' for key, value in settings.items()
    ]
    batching = "dynamic_batching { }\n" if max_batch_size else ""
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "ferry_vision"\nmax_batch_size: {max_batch_size}\n{io}'
        f"parameters [ {', '.join(parameters)} ]\n{batching}"
    )


def _tensor(name: str, datatype: str, dims: str, labels: bool = False) -> str:
    label = ' label_filename: "labels.txt"' if labels else ""
    return f'{{ name: "{name}" data_type: TYPE_{datatype} dims: [ {dims} ]{label} }}'


def add_cascade(repo: Path) -> None:
    """The two real models, four vision steps and the ``digit_cascade`` ensemble."""
    for model in ("digit_detector", "digits"):
        shutil.copytree(MODEL_REPO / model, repo / model)
    d = MAX_DETECTIONS

    def detections(labels: bool) -> list[str]:
        return [
            _tensor("num_detections", "INT32", "1"),
            _tensor("detection_boxes", "FP32", f"{d}, 4"),
            _tensor("detection_scores", "FP32", f"{d}"),
            _tensor("detection_classes", "INT32", f"{d}", labels=labels),
        ]

    _vision(
        repo,
        "digit_preprocess",
        "decode_preprocess",
        16,
        f"input [ {_tensor('IMAGE', 'STRING', '1')} ]\n"
        f"output [ {_tensor('TENSOR', 'FP32', '3, 128, 128')}, {_tensor('TRANSFORM', 'FP64', '8')} ]\n",
        preprocess=DETECTOR_PREPROCESS,
    )
    _vision(
        repo,
        "digit_boxes",
        "detection",
        16,
        f"input [ {_tensor('output0', 'FP32', '14, 320')}, {_tensor('TRANSFORM', 'FP64', '8')} ]\n"
        f"output [ {', '.join(detections(False))} ]\n",
        detection=DETECTION,
    )
    _vision(
        repo,
        "digit_crops",
        "crop",
        0,
        f"input [ {_tensor('IMAGE', 'STRING', '-1, 1')}, {_tensor('detection_boxes', 'FP32', f'-1, {d}, 4')}, "
        f"{_tensor('num_detections', 'INT32', '-1, 1')} ]\n"
        f"output [ {_tensor('CROPS', 'FP32', '-1, 1, 28, 28')}, {_tensor('CROP_IMAGE_INDEX', 'INT32', '-1, 1')} ]\n",
        preprocess=DIGIT_PREPROCESS,
    )
    _vision(
        repo,
        "digit_top",
        "classification",
        64,
        f"input [ {_tensor('LOGITS', 'FP32', '10')} ]\n"
        f"output [ {_tensor('CLASS_IDS', 'INT32', str(TOP_K))}, {_tensor('SCORES', 'FP32', str(TOP_K))} ]\n",
        classification="softmax: true",
    )
    same = {name: name for name in ("num_detections", "detection_boxes", "detection_scores", "detection_classes")}
    outputs = [
        *detections(True),
        _tensor("CROP_IMAGE_INDEX", "INT32", "1"),
        _tensor("CLASS_IDS", "INT32", str(TOP_K), labels=True),
        _tensor("SCORES", "FP32", str(TOP_K)),
        _tensor("logits", "FP32", "10"),  # the classifier's raw row per crop: an extra per detection
    ]
    add_ensemble(
        repo,
        "digit_cascade",
        "max_batch_size: 16\n"
        f"input [ {_tensor('IMAGE', 'STRING', '1')} ]\n"
        f"output [ {', '.join(outputs)} ]\n"
        + scheduling(
            step("digit_preprocess", {"IMAGE": "IMAGE"}, {"TENSOR": "tensor", "TRANSFORM": "transform"}),
            step("digit_detector", {"images": "tensor"}, {"output0": "raw"}),
            step("digit_boxes", {"output0": "raw", "TRANSFORM": "transform"}, same),
            step(
                "digit_crops",
                {"IMAGE": "IMAGE", "detection_boxes": "detection_boxes", "num_detections": "num_detections"},
                {"CROPS": "crops", "CROP_IMAGE_INDEX": "CROP_IMAGE_INDEX"},
            ),
            step("digits", {"input": "crops"}, {"logits": "logits"}),
            step("digit_top", {"LOGITS": "logits"}, {"CLASS_IDS": "CLASS_IDS", "SCORES": "SCORES"}),
        ),
    )
    shutil.copy(MODEL_REPO / "digits" / "labels.txt", repo / "digit_cascade" / "labels.txt")


FACES = 12  # detections per image (the 3x3 grid has 9) of the face ensemble


def add_face_landmarks(repo: Path) -> None:
    """``face_landmarks``: encoded photos -> BlazeFace's own pre-processing -> ``face_net`` (the
    bundled face detector's file, one image per execution) -> SSD decoding with its six keypoints, as
    ``face_detector``'s ``ferry_image`` does it. Adds ``face_detector`` itself too, to compare."""
    shutil.copytree(MODEL_REPO / "face_detector", repo / "face_detector")
    (repo / "face_net" / "1").mkdir(parents=True)
    shutil.copy(MODEL_REPO / "face_detector" / "1" / "model.onnx", repo / "face_net" / "1" / "model.onnx")
    (repo / "face_net" / "config.pbtxt").write_text(
        'name: "face_net"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        f"input [ {_tensor('input', 'FP32', '1, 3, 128, 128')} ]\n"
        f"output [ {_tensor('regressors', 'FP32', '1, 896, 16')}, {_tensor('classificators', 'FP32', '1, 896, 1')} ]\n"
    )
    f = FACES
    detections = [
        _tensor("num_detections", "INT32", "1"),
        _tensor("detection_boxes", "FP32", f"{f}, 4"),
        _tensor("detection_scores", "FP32", f"{f}"),
        _tensor("detection_classes", "INT32", f"{f}"),
        _tensor("detection_keypoints", "FP32", f"{f}, 6, 2"),
    ]
    _vision(
        repo,
        "face_preprocess",
        "decode_preprocess",
        1,
        f"input [ {_tensor('IMAGE', 'STRING', '1')} ]\n"
        f"output [ {_tensor('TENSOR', 'FP32', '3, 128, 128')}, {_tensor('TRANSFORM', 'FP64', '8')} ]\n",
        preprocess=_pipeline_settings("face_detector", "preprocess"),
    )
    _vision(
        repo,
        "face_boxes",
        "detection",
        1,
        f"input [ {_tensor('regressors', 'FP32', '896, 16')}, {_tensor('classificators', 'FP32', '896, 1')}, "
        f"{_tensor('TRANSFORM', 'FP64', '8')} ]\noutput [ {', '.join(detections)} ]\n",
        detection=_pipeline_settings("face_detector", "detection", max_detections=f),
    )
    same = {name: name for name in ("num_detections", "detection_boxes", "detection_scores", "detection_classes")}
    add_ensemble(
        repo,
        "face_landmarks",
        f"max_batch_size: 1\ninput [ {_tensor('IMAGE', 'STRING', '1')} ]\noutput [ {', '.join(detections)} ]\n"
        + scheduling(
            step("face_preprocess", {"IMAGE": "IMAGE"}, {"TENSOR": "tensor", "TRANSFORM": "transform"}),
            step("face_net", {"input": "tensor"}, {"regressors": "regressors", "classificators": "classificators"}),
            step(
                "face_boxes",
                {"regressors": "regressors", "classificators": "classificators", "TRANSFORM": "transform"},
                {**same, "detection_keypoints": "detection_keypoints"},
            ),
        ),
    )


def add_classify_ensemble(repo: Path) -> None:
    """``digit_classify``: encoded digit images -> pre-processing -> ``digits`` -> top-k (after
    Triton's image-client ensemble). Needs ``add_cascade`` first (it reuses ``digit_top``)."""
    _vision(
        repo,
        "digit_image",
        "decode_preprocess",
        64,
        f"input [ {_tensor('IMAGE', 'STRING', '1')} ]\noutput [ {_tensor('TENSOR', 'FP32', '1, 28, 28')} ]\n",
        preprocess=DIGIT_PREPROCESS,
    )
    add_ensemble(
        repo,
        "digit_classify",
        "max_batch_size: 64\n"
        f"input [ {_tensor('IMAGE', 'STRING', '1')} ]\n"
        f"output [ {_tensor('CLASS_IDS', 'INT32', str(TOP_K), labels=True)}, "
        f"{_tensor('SCORES', 'FP32', str(TOP_K))} ]\n"
        + scheduling(
            step("digit_image", {"IMAGE": "IMAGE"}, {"TENSOR": "tensor"}),
            step("digits", {"input": "tensor"}, {"logits": "logits"}),
            step("digit_top", {"LOGITS": "logits"}, {"CLASS_IDS": "CLASS_IDS", "SCORES": "SCORES"}),
        ),
    )
    shutil.copy(MODEL_REPO / "digits" / "labels.txt", repo / "digit_classify" / "labels.txt")


def digit_scenes(count: int, seed: int = 0, per_scene: int = 3) -> tuple[list[bytes], list[list[int]]]:
    """PNG scenes of held-out sklearn digits (white on black, 48 px, in a row) and their classes,
    left to right. The digits classifier never saw these digits."""
    import io

    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    held_out = np.load(MODEL_REPO / "digits" / "test_split.npz")["test_indices"]
    digits = load_digits()
    rng = np.random.default_rng(seed)
    encoded, truth = [], []
    for _ in range(count):
        canvas = np.zeros((160, 70 * per_scene + 30), np.uint8)
        classes = []
        for slot in range(per_scene):
            pick = held_out[rng.integers(len(held_out))]
            pixels = np.round(digits.images[pick] * 255 / 16).astype(np.uint8)
            canvas[40:88, 20 + slot * 70 : 68 + slot * 70] = np.array(
                Image.fromarray(pixels).resize((48, 48), Image.Resampling.BILINEAR)
            )
            classes.append(int(digits.target[pick]))
        buffer = io.BytesIO()
        Image.fromarray(canvas).convert("RGB").save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
        truth.append(classes)
    return encoded, truth
