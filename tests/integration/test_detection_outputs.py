"""Decoded detections as V2 outputs: a detection model sent encoded images over V2 infer (REST and
gRPC, real ``tritonclient``) returns ``detection_boxes`` & co when asked for them by name, the
same faces /detect returns and MediaPipe's BlazeFace reference, within 1 px (``face_detector``,
one image per execution, with keypoints); ``digit_detector`` covers a batching model without. Both
are read, never changed: the session's server (tests/conftest.py) serves them."""

from __future__ import annotations

import io
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from PIL import Image
from tritonclient.utils import InferenceServerException

from ..conftest import RunningServer, detector_module
from .test_real_models import PIXEL_TOLERANCE, SCORE_TOLERANCE, matched, reference, reference_module

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MODEL = "face_detector"
BATCHING = "digit_detector"
DECODED = ["num_detections", "detection_boxes", "detection_scores", "detection_classes", "detection_keypoints"]
LIMIT = 100  # the config leaves max_detections at 0: the server default
KEYPOINTS = 6


@pytest.fixture(scope="module")
def photos() -> dict[str, bytes]:
    return reference_module(MODEL).photos()


@pytest.fixture(scope="module")
def detected(server: RunningServer, photos: dict[str, bytes]) -> list[list[dict[str, Any]]]:
    """What /detect returns for the photos, one list per photo."""
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        response = client.post(f"/v2/models/{MODEL}/detect", files=[("image", (n, d)) for n, d in photos.items()])
    assert response.status_code == 200, response.text
    return [result["detections"] for result in response.json()["results"]]


def images_input(module: Any, photos: dict[str, bytes]) -> Any:
    tensor = module.InferInput("input", [len(photos)], "BYTES")
    tensor.set_data_from_numpy(np.array(list(photos.values()), dtype=object))
    return tensor


def as_detections(result: Any, image: int) -> list[dict[str, Any]]:
    count = int(result.as_numpy("num_detections")[image, 0])
    return [
        {
            "score": float(result.as_numpy("detection_scores")[image, row]),
            "class_id": int(result.as_numpy("detection_classes")[image, row]),
            "box": result.as_numpy("detection_boxes")[image, row].tolist(),
            "keypoints": result.as_numpy("detection_keypoints")[image, row].tolist(),
        }
        for row in range(count)
    ]


def check_decoded(result: Any, photos: dict[str, bytes], detected: list[list[dict[str, Any]]]) -> None:
    """Shapes and padding as declared; each photo's faces as MediaPipe's and as /detect's."""
    count = len(photos)
    assert result.as_numpy("num_detections").shape == (count, 1)
    assert result.as_numpy("detection_boxes").shape == (count, LIMIT, 4)
    assert result.as_numpy("detection_classes").dtype == np.int32
    assert result.as_numpy("detection_keypoints").shape == (count, LIMIT, KEYPOINTS, 2)
    expected = reference(MODEL)
    faces = 0
    for image, name in enumerate(photos):
        found = as_detections(result, image)
        faces += len(found)
        padding = len(found)
        assert not result.as_numpy("detection_boxes")[image, padding:].any()
        assert not result.as_numpy("detection_keypoints")[image, padding:].any()
        assert (result.as_numpy("detection_classes")[image, padding:] == -1).all()
        for got, want in matched(found, expected[name]["detections"], key="score"):
            assert got["class_id"] == 0
            assert got["score"] == pytest.approx(want["score"], abs=SCORE_TOLERANCE)
            np.testing.assert_allclose(got["box"], want["box"], atol=PIXEL_TOLERANCE)
            np.testing.assert_allclose(got["keypoints"], want["keypoints"], atol=PIXEL_TOLERANCE)
        for got, want in matched(found, detected[image], key="score"):  # /detect rounds to 0.01 px
            assert got["score"] == pytest.approx(want["score"], abs=1e-6)
            np.testing.assert_allclose(got["box"], want["box"], atol=0.006)
            np.testing.assert_allclose(got["keypoints"], want["keypoints"], atol=0.006)
    assert faces == 23  # faces in 12 photos (two grids), none in 3: the comparison above is not vacuous


def test_decoded_detections_over_http(
    server: RunningServer, photos: dict[str, bytes], detected: list[list[dict[str, Any]]]
) -> None:
    client = thttp.InferenceServerClient(server.http_url, network_timeout=60)
    outputs = [thttp.InferRequestedOutput(name) for name in DECODED]
    result = client.infer(MODEL, [images_input(thttp, photos)], outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == DECODED
    check_decoded(result, photos, detected)


def test_decoded_detections_over_grpc(
    server: RunningServer, photos: dict[str, bytes], detected: list[list[dict[str, Any]]]
) -> None:
    client = tgrpc.InferenceServerClient(server.grpc_url)
    outputs = [tgrpc.InferRequestedOutput(name) for name in DECODED]
    result = client.infer(MODEL, [images_input(tgrpc, photos)], outputs=outputs)
    check_decoded(result, photos, detected)


def test_decoded_and_raw_outputs_together_and_raw_by_default(server: RunningServer, photos: dict[str, bytes]) -> None:
    client = tgrpc.InferenceServerClient(server.grpc_url)
    one = {"astronaut": photos["astronaut"]}
    default = client.infer(MODEL, [images_input(tgrpc, one)])
    assert sorted(o.name for o in default.get_response().outputs) == ["classificators", "regressors"]
    outputs = [tgrpc.InferRequestedOutput(name) for name in ("regressors", "num_detections")]
    both = client.infer(MODEL, [images_input(tgrpc, one)], outputs=outputs)
    np.testing.assert_array_equal(both.as_numpy("regressors"), default.as_numpy("regressors"))
    assert both.as_numpy("num_detections").tolist() == [[1]]


def test_decoded_outputs_of_a_tensor_request_are_invalid(server: RunningServer) -> None:
    tensor = np.zeros((1, 3, 128, 128), np.float32)
    http_input = thttp.InferInput("input", list(tensor.shape), "FP32")
    http_input.set_data_from_numpy(tensor)
    client = thttp.InferenceServerClient(server.http_url, network_timeout=60)
    with pytest.raises(InferenceServerException) as caught:
        client.infer(MODEL, [http_input], outputs=[thttp.InferRequestedOutput("detection_boxes")])
    assert caught.value.status() == "400"
    assert "need encoded images" in caught.value.message() and "detection_boxes" in caught.value.message()
    grpc_input = tgrpc.InferInput("input", list(tensor.shape), "FP32")
    grpc_input.set_data_from_numpy(tensor)
    with pytest.raises(InferenceServerException) as caught:
        tgrpc.InferenceServerClient(server.grpc_url).infer(
            MODEL, [grpc_input], outputs=[tgrpc.InferRequestedOutput("detection_boxes")]
        )
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "need encoded images" in caught.value.message()


def test_metadata_lists_the_decoded_outputs(server: RunningServer) -> None:
    expected = {
        "num_detections": ("INT32", [-1, 1]),
        "detection_boxes": ("FP32", [-1, LIMIT, 4]),
        "detection_scores": ("FP32", [-1, LIMIT]),
        "detection_classes": ("INT32", [-1, LIMIT]),
        "detection_keypoints": ("FP32", [-1, LIMIT, KEYPOINTS, 2]),
    }
    over_http = thttp.InferenceServerClient(server.http_url).get_model_metadata(MODEL)["outputs"]
    over_grpc = tgrpc.InferenceServerClient(server.grpc_url).get_model_metadata(MODEL).outputs
    assert [o["name"] for o in over_http] == ["regressors", "classificators", *DECODED]
    assert {o["name"]: (o["datatype"], o["shape"]) for o in over_http[2:]} == expected
    assert {o.name: (o.datatype, list(o.shape)) for o in over_grpc[2:]} == expected


def test_decoded_detections_of_a_batching_model_equal_detect(server: RunningServer) -> None:
    """Three synthetic digit scenes in one batch: the tensors hold /detect's digits, no keypoints."""
    encoded = []
    for scene in detector_module().held_out_scenes(count=3):
        buffer = io.BytesIO()
        Image.fromarray(scene.image).save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        response = client.post(
            f"/v2/models/{BATCHING}/detect", files=[("images", (f"{i}.png", d)) for i, d in enumerate(encoded)]
        )
    assert response.status_code == 200, response.text
    detected = [result["detections"] for result in response.json()["results"]]
    tensor = thttp.InferInput("images", [len(encoded)], "BYTES")
    tensor.set_data_from_numpy(np.array(encoded, dtype=object))
    client = thttp.InferenceServerClient(server.http_url, network_timeout=60)
    names = DECODED[:-1]
    result = client.infer(BATCHING, [tensor], outputs=[thttp.InferRequestedOutput(name) for name in names])
    assert result.as_numpy("detection_boxes").shape == (3, 100, 4)
    assert [int(n) for n in result.as_numpy("num_detections")[:, 0]] == [len(found) for found in detected]
    assert sum(len(found) for found in detected) > 3  # digits in every scene: not vacuous
    for image, found in enumerate(detected):
        count = len(found)
        assert result.as_numpy("detection_classes")[image, :count].tolist() == [d["class_id"] for d in found]
        np.testing.assert_allclose(
            result.as_numpy("detection_scores")[image, :count], [d["score"] for d in found], atol=1e-6
        )
        np.testing.assert_allclose(
            result.as_numpy("detection_boxes")[image, :count], [d["box"] for d in found], atol=0.006
        )
    with pytest.raises(InferenceServerException) as caught:
        client.infer(BATCHING, [tensor], outputs=[thttp.InferRequestedOutput("detection_keypoints")])
    assert caught.value.status() == "400" and "detection_keypoints" in caught.value.message()
    metadata = client.get_model_metadata(BATCHING)["outputs"]
    assert [o["name"] for o in metadata] == ["output0", *names]
