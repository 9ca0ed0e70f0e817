"""Detect-then-classify in one request: the bundled digit detector, then the digits classifier on
every digit it found, through vision steps, against a real server and the unmodified tritonclient.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from PIL import Image

from ferry.backends.vision_steps.crops import cut
from ferry.pipelines import PreprocessSpec, decode_image, preprocess
from ferry_client import HttpClient
from ferry_client.protocol import model_config_pb2 as mc

from ..conftest import RunningServer, start_server
from ..ensembles.cascade import (
    DIGIT_PREPROCESS,
    FACES,
    MAX_DETECTIONS,
    TOP_K,
    add_cascade,
    add_classify_ensemble,
    add_face_landmarks,
    digit_scenes,
)
from .triton_helpers import connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SCENES = 10


@pytest.fixture(scope="module")
def cascade_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo: Path = tmp_path_factory.mktemp("cascade") / "models"
    add_cascade(repo)
    add_classify_ensemble(repo)
    add_face_landmarks(repo)
    running = start_server(repo, repo.parent / "server.log", "--model-control-mode", "explicit", "--load-model", "*")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def scenes() -> tuple[list[bytes], list[list[int]]]:
    return digit_scenes(SCENES)


def _cascade(server: RunningServer, images: list[bytes]) -> dict[str, np.ndarray]:
    tensor = tgrpc.InferInput("IMAGE", [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=object).reshape(-1, 1))
    result = tgrpc.InferenceServerClient(server.grpc_url).infer("digit_cascade", [tensor])
    names = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
    return {n: result.as_numpy(n) for n in (*names, "CROP_IMAGE_INDEX", "CLASS_IDS", "SCORES")}


def _stats(server: RunningServer, model: str) -> dict:
    return thttp.InferenceServerClient(server.http_url).get_inference_statistics(model)["model_stats"][0]


def test_cascade_finds_and_classifies_every_digit_in_one_batch(cascade_server, scenes) -> None:
    images, truth = scenes
    before = _stats(cascade_server, "digits")
    out = _cascade(cascade_server, images)
    after = _stats(cascade_server, "digits")
    counts = out["num_detections"].reshape(-1)
    assert counts.tolist() == [3] * SCENES
    index = out["CROP_IMAGE_INDEX"].reshape(-1)
    assert index.tolist() == [i for i in range(SCENES) for _ in range(3)]  # crops in detection order per image
    right_detector = right_classifier = 0
    for image in range(SCENES):
        left_to_right = np.argsort(out["detection_boxes"][image, :3, 0])
        right_detector += int((out["detection_classes"][image, left_to_right] == truth[image]).sum())
        crops = np.flatnonzero(index == image)
        right_classifier += int((out["CLASS_IDS"][crops, 0][left_to_right] == truth[image]).sum())
    assert right_detector == 3 * SCENES
    assert right_classifier >= 0.8 * 3 * SCENES  # held-out digits, cropped from scenes (93% when written)
    # The 30 crops of the 10 images went to the classifier as one batch: one execution of 30 items.
    assert after["execution_count"] - before["execution_count"] == 1
    assert after["inference_count"] - before["inference_count"] == 3 * SCENES


def test_cascade_equals_its_stages_called_one_by_one(cascade_server, scenes) -> None:
    images, _ = scenes
    out = _cascade(cascade_server, images[:4])
    with httpx.Client(base_url=f"http://{cascade_server.http_url}", timeout=60) as client:
        files = [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(images[:4])]
        detected = client.post("/v2/models/digit_detector/detect", files=files).json()["results"]
    spec = PreprocessSpec.from_config(_text(DIGIT_PREPROCESS, mc.FerryPreprocess()), [1, 28, 28], "FP32")
    crops = []
    for image, result in enumerate(detected):
        found = result["detections"]
        assert len(found) == int(out["num_detections"][image, 0])
        np.testing.assert_allclose(out["detection_boxes"][image, : len(found)], [d["box"] for d in found], atol=0.01)
        assert out["detection_classes"][image, : len(found)].tolist() == [d["class_id"] for d in found]
        picture = decode_image(images[image], max_pixels=10**7)
        crops.extend(preprocess(cut(picture, out["detection_boxes"][image, row]), spec)[0] for row in range(len(found)))
    tensor = tgrpc.InferInput("input", [len(crops), 1, 28, 28], "FP32")
    tensor.set_data_from_numpy(np.stack(crops))
    logits = tgrpc.InferenceServerClient(cascade_server.grpc_url).infer("digits", [tensor]).as_numpy("logits")
    assert out["CLASS_IDS"].tolist() == np.argsort(-logits, axis=1, kind="stable")[:, :TOP_K].tolist()


def test_detect_endpoint_nests_each_digits_classes(cascade_server, scenes) -> None:
    images, truth = scenes
    with httpx.Client(base_url=f"http://{cascade_server.http_url}", timeout=60) as client:
        files = [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(images[:3])]
        response = client.post("/v2/models/digit_cascade/detect", files=files)
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        refused = client.post("/v2/models/digit_cascade/classify", content=images[0])
        assert refused.status_code == 400
        assert refused.json()["error"] == "ensemble 'digit_cascade' classifies detections (a cascade); use /detect"
        refused = client.post("/v2/models/digit_cascade/detect?score_threshold=0.5", content=images[0])
        assert refused.json()["error"] == (
            "ensemble 'digit_cascade': score_threshold is set by its steps' configs, not per request"
        )
    out = _cascade(cascade_server, images[:3])
    for image, result in enumerate(results):
        detections = result["detections"]
        assert [d["label"] for d in detections] == [str(c) for c in out["detection_classes"][image, :3]]
        for row, detection in enumerate(detections):
            assert [c["index"] for c in detection["classes"]] == out["CLASS_IDS"][image * 3 + row].tolist()
            assert [c["label"] for c in detection["classes"]] == [str(c) for c in out["CLASS_IDS"][image * 3 + row]]
    assert sorted(d["label"] for d in results[0]["detections"]) == sorted(str(c) for c in truth[0])


def test_detect_on_a_cascade_carries_each_crops_extra_outputs(cascade_server, scenes) -> None:
    """Every other output the ensemble returns per crop (here the classifier's raw logits) comes
    back with its detection, in the /detect JSON and in ferry_client's Detection (with the classes)."""
    images, _ = scenes
    out = _cascade(cascade_server, images[:3])
    tensor = tgrpc.InferInput("IMAGE", [3, 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images[:3], dtype=object).reshape(-1, 1))
    logits = tgrpc.InferenceServerClient(cascade_server.grpc_url).infer("digit_cascade", [tensor]).as_numpy("logits")
    with HttpClient(cascade_server.http_url) as client:
        found = client.detect("digit_cascade", images[:3])
    crop = 0
    for image, detections in enumerate(found):
        assert len(detections) == int(out["num_detections"][image, 0]) == 3
        for detection in detections:
            assert detection.extras is not None and list(detection.extras) == ["logits"]
            np.testing.assert_allclose(detection.extras["logits"], logits[crop], rtol=1e-6)
            assert detection.classes is not None
            assert [c.index for c in detection.classes] == out["CLASS_IDS"][crop].tolist()
            assert detection.keypoints is None
            crop += 1


def test_detect_on_a_landmark_ensemble_carries_mediapipes_keypoints(cascade_server) -> None:
    """A detect-with-landmarks ensemble: /detect returns each face's six keypoints, MediaPipe's own
    (model_repo/face_detector/reference.json), as the face detector's own /detect does."""
    from .test_real_models import assert_same_detection, matched, reference, reference_module

    expected = reference("face_detector")
    photos = reference_module("face_detector").photos()
    with HttpClient(cascade_server.http_url) as client:
        through_ensemble = client.detect("face_landmarks", list(photos.values()))
        through_model = client.detect("face_detector", list(photos.values()))
    assert sum(len(found) for found in through_ensemble) == 23
    for name, ours, model in zip(photos, through_ensemble, through_model, strict=True):
        assert [d.keypoints for d in ours] == [d.keypoints for d in model]
        assert len(ours) <= FACES
        as_json = [{"label": d.label, "score": d.score, "box": d.box, "keypoints": d.keypoints} for d in ours]
        for got, want in matched(as_json, expected[name]["detections"], key="score"):
            assert got["keypoints"] is not None and len(got["keypoints"]) == 6
            assert_same_detection(got, want)


def test_image_ensemble_classifies_like_the_model_pipeline(cascade_server, digit_pngs) -> None:
    files, labels = digit_pngs
    with httpx.Client(base_url=f"http://{cascade_server.http_url}", timeout=60) as client:
        body = [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(files[:40])]
        through_ensemble = client.post("/v2/models/digit_classify/classify", files=body).json()["results"]
        through_model = client.post("/v2/models/digits/classify?top_k=3", files=body).json()["results"]
    for ours, theirs in zip(through_ensemble, through_model, strict=True):
        assert [c["label"] for c in ours["classes"]] == [c["label"] for c in theirs["classes"]]
        np.testing.assert_allclose(
            [c["score"] for c in ours["classes"]], [c["score"] for c in theirs["classes"]], rtol=1e-5
        )
    top1 = [int(r["classes"][0]["label"]) for r in through_ensemble]
    assert np.mean(np.array(top1) == labels[:40]) >= 0.9


def _text(text: str, message):
    from google.protobuf import text_format

    return text_format.Parse(text, message)


def test_images_without_detections_flow_through_the_cascade(cascade_server, scenes) -> None:
    images, _ = scenes
    buffer = io.BytesIO()
    Image.new("RGB", (120, 90)).save(buffer, format="PNG")
    blank = buffer.getvalue()
    out = _cascade(cascade_server, [blank])
    assert out["num_detections"].tolist() == [[0]]
    assert out["CLASS_IDS"].shape == (0, TOP_K) and out["CROP_IMAGE_INDEX"].shape == (0, 1)
    out = _cascade(cascade_server, [blank, images[0], blank])
    assert out["num_detections"].reshape(-1).tolist() == [0, 3, 0]
    assert out["CROP_IMAGE_INDEX"].reshape(-1).tolist() == [1, 1, 1]
    with httpx.Client(base_url=f"http://{cascade_server.http_url}", timeout=60) as client:
        response = client.post("/v2/models/digit_cascade/detect", content=blank)
    assert response.json()["results"] == [{"detections": []}]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_bad_image_fails_naming_the_step(cascade_server, scenes, protocol: str) -> None:
    images, _ = scenes
    triton = connect(protocol, cascade_server)
    broken = np.array([images[0], images[1][:100]], dtype=object).reshape(-1, 1)
    message = triton.expect_error(
        "invalid",
        "ensemble 'digit_cascade' step 0 (model 'digit_preprocess'): image 1: ",
        triton.infer,
        "digit_cascade",
        {"IMAGE": broken},
        datatypes={"IMAGE": "BYTES"},
    )
    assert "truncated or corrupt PNG data" in message


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_hostile_boxes_sent_to_the_crop_step_are_invalid_arguments(cascade_server, scenes, protocol: str) -> None:
    """A client calling the crop step directly with NaN or infinite boxes gets 400 / INVALID_ARGUMENT
    (``math.floor(nan)`` used to make it INTERNAL), and the step still crops good boxes."""
    images, _ = scenes
    triton = connect(protocol, cascade_server)
    picture = np.array([images[0]], dtype=object).reshape(1, 1)
    count = np.array([[1]], np.int32)
    for bad in (np.nan, np.inf, -np.inf):
        boxes = np.zeros((1, MAX_DETECTIONS, 4), np.float32)
        boxes[0, 0] = (0.0, 0.0, bad, 10.0)
        message = triton.expect_error(
            "invalid",
            "image 0: detection_boxes must be finite numbers",
            triton.infer,
            "digit_crops",
            {"IMAGE": picture, "num_detections": count, "detection_boxes": boxes},
            datatypes={"IMAGE": "BYTES"},
        )
        assert str(cascade_server.repository) not in message
    good = np.zeros((1, MAX_DETECTIONS, 4), np.float32)
    good[0, 0] = (0.0, 0.0, 10.0, 10.0)
    out = triton.infer(
        "digit_crops",
        {"IMAGE": picture, "num_detections": count, "detection_boxes": good},
        datatypes={"IMAGE": "BYTES"},
    )
    assert out.as_numpy("CROP_IMAGE_INDEX").tolist() == [[0]]
