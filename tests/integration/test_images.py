"""Images through the running server: /classify with real PNG files, and encoded images as a BYTES
input of V2 infer from the official tritonclient."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from PIL import Image

from ..conftest import detector_module as _detector_module

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_classify_endpoint_accuracy(server, digit_pngs) -> None:
    files, labels = digit_pngs
    predicted = []
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        for start in range(0, len(files), 50):  # multipart, 50 images per request
            chunk = files[start : start + 50]
            response = client.post(
                "/v2/models/digits/classify",
                files=[("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(chunk)],
            )
            assert response.status_code == 200, response.text
            predicted.extend(int(r["classes"][0]["label"]) for r in response.json()["results"])
        single = client.post(
            "/v2/models/digits/classify?top_k=2", content=files[0], headers={"Content-Type": "image/png"}
        ).json()
    accuracy = float(np.mean(np.array(predicted) == labels))
    assert accuracy >= 0.95, accuracy
    assert len(single["results"][0]["classes"]) == 2
    assert sum(c["score"] for c in single["results"][0]["classes"]) <= 1.0 + 1e-6


def test_encoded_images_through_v2_infer(server, digit_pngs) -> None:
    files, labels = digit_pngs
    client = tgrpc.InferenceServerClient(server.grpc_url)
    correct = 0
    for start in range(0, 120, 8):
        batch = np.array(files[start : start + 8], dtype=object)
        tensor = tgrpc.InferInput("input", [len(batch)], "BYTES")
        tensor.set_data_from_numpy(batch)
        logits = client.infer("digits", [tensor]).as_numpy("logits")
        assert logits.shape == (len(batch), 10)
        correct += int((logits.argmax(1) == labels[start : start + 8]).sum())
    assert correct / 120 >= 0.95


def test_bad_images_get_clear_errors_and_the_server_keeps_serving(server, digit_pngs) -> None:
    files, _ = digit_pngs
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        cases = {
            b"": "empty body",
            b"not an image at all": "image 0: not a recognised image format",
            files[0][: len(files[0]) // 2]: "image 0:",
        }
        for body, message in cases.items():
            response = client.post(
                "/v2/models/digits/classify", content=body, headers={"Content-Type": "application/octet-stream"}
            )
            assert response.status_code == 400 and message in response.json()["error"], response.text
        response = client.post("/v2/models/simple/classify", content=files[0])
        assert response.status_code == 400 and "no image pipeline" in response.json()["error"]
        response = client.post("/v2/models/digits/detect", content=files[0])
        assert response.status_code == 400 and "use /classify" in response.json()["error"]
        response = client.post("/v2/models/digits/classify", content=files[0])
        assert response.status_code == 200


def test_detector_map_through_the_server(server) -> None:
    """Held-out synthetic scenes of several sizes (letterboxed by the server) reach mAP@0.5 >= 0.8."""
    build = _detector_module()
    scenes = build.held_out_scenes(count=90)
    detections, truth = [], []
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        for start in range(0, len(scenes), 10):
            chunk = scenes[start : start + 10]
            files = []
            for index, scene in enumerate(chunk):
                buffer = io.BytesIO()
                Image.fromarray(scene.image).save(buffer, format="PNG")
                files.append(("images", (f"{index}.png", buffer.getvalue(), "image/png")))
            response = client.post("/v2/models/digit_detector/detect", files=files)
            assert response.status_code == 200, response.text
            for scene, result in zip(chunk, response.json()["results"], strict=True):
                found = result["detections"]
                boxes = np.array([d["box"] for d in found], dtype=np.float32).reshape(-1, 4)
                assert (boxes[:, 2] <= scene.image.shape[1]).all() and (boxes[:, 3] <= scene.image.shape[0]).all()
                detections.append(
                    (
                        boxes,
                        np.array([d["score"] for d in found], dtype=np.float32),
                        np.array([d["class_id"] for d in found], dtype=np.int64),
                    )
                )
                truth.append((scene.boxes, scene.classes))
                assert all(d["label"] == str(d["class_id"]) for d in found)
    mean_ap, _ = build.mean_average_precision(detections, truth)
    assert mean_ap >= 0.8, mean_ap


def test_detector_takes_encoded_images_over_grpc(server) -> None:
    """V2 infer with a BYTES input of PNG scenes: the raw YOLOv8 head comes back as a tensor."""
    build = _detector_module()
    scenes = build.held_out_scenes(count=3)
    encoded = []
    for scene in scenes:
        buffer = io.BytesIO()
        Image.fromarray(scene.image).save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
    tensor = tgrpc.InferInput("images", [3], "BYTES")
    tensor.set_data_from_numpy(np.array(encoded, dtype=object))
    output = tgrpc.InferenceServerClient(server.grpc_url).infer("digit_detector", [tensor]).as_numpy("output0")
    assert output.shape == (3, 14, 320)
    assert float(output[:, 4:, :].max()) > 0.5  # confident class scores for the digits in each scene
