"""Fixed-batch image models (exported with input [1, 3, H, W]) through every image path of a real
server: /classify, /detect and encoded images as a BYTES input over REST and gRPC. Two ways to
configure them, both Triton's: ``max_batch_size: 0`` with dims [1, 3, H, W], and dims [3, H, W] with
``reshape { shape: [1, 3, H, W] }``. A model that cannot batch runs one image per execution."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from ferry_client.grpc import GrpcClient

from ..conftest import RunningServer, start_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

COLOURS = [(255, 0, 0), (0, 200, 0), (0, 0, 150)]  # the brightest channel is the class
#: One detection, in model-input pixels of a 32x32 input: centre (16, 16), 8x8, score 0.9.
DETECTION = np.array([[[16.0, 0.0], [16.0, 0.0], [8.0, 0.0], [8.0, 0.0], [0.9, 0.0]]], dtype=np.float32)


def save_model(path: Path, nodes: list, inputs: list, outputs: list, initializers: list) -> None:
    graph = helper.make_graph(nodes, path.parent.parent.name, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True)
    onnx.save(model, path)


def channel_means_model(model_dir: Path) -> None:
    """scores [1, 3] = the mean of each channel of x [1, 3, 16, 16] (fixed batch of one)."""
    save_model(
        model_dir / "1" / "model.onnx",
        [helper.make_node("ReduceMean", ["x"], ["scores"], axes=[2, 3], keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3])],
        [],
    )


def constant_detector_model(model_dir: Path) -> None:
    """A YOLOv8-style head [1, 5, 2] that always finds DETECTION (x [1, 3, 32, 32] still feeds it)."""
    save_model(
        model_dir / "1" / "model.onnx",
        [
            helper.make_node("ReduceMean", ["x"], ["mean"], keepdims=0),
            helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
            helper.make_node("Add", ["head", "nothing"], ["output0"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 5, 2])],
        [numpy_helper.from_array(DETECTION, "head"), numpy_helper.from_array(np.float32(0.0), "zero")],
    )


def config(name: str, input_dims: str, output_dims: str, pipeline: str) -> str:
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        f'input [{{ name: "x" data_type: TYPE_FP32 {input_dims} }}]\n'
        f"output [{{ name: {output_dims} }}]\n"
        f"instance_group [{{ kind: KIND_CPU count: 1 }}]\n"
        f"ferry_image {{ {pipeline} }}\n"
    )


CLASSIFY = "preprocess { resize: EXACT resize_engine: OPENCV } classification { top_k: 3 }"
DETECT = "preprocess { resize: LETTERBOX pad_value: 114 } detection { format: YOLOV8 score_threshold: 0.5 }"
MODELS = {
    "cls_leading_one": (
        channel_means_model,
        config("cls_leading_one", "dims: [1, 3, 16, 16]", '"scores" data_type: TYPE_FP32 dims: [1, 3]', CLASSIFY),
    ),
    "cls_reshape": (
        channel_means_model,
        config(
            "cls_reshape",
            "dims: [3, 16, 16] reshape { shape: [1, 3, 16, 16] }",
            '"scores" data_type: TYPE_FP32 dims: [3] reshape { shape: [1, 3] }',
            CLASSIFY,
        ),
    ),
    "det_leading_one": (
        constant_detector_model,
        config("det_leading_one", "dims: [1, 3, 32, 32]", '"output0" data_type: TYPE_FP32 dims: [1, 5, 2]', DETECT),
    ),
    "det_reshape": (
        constant_detector_model,
        config(
            "det_reshape",
            "dims: [3, 32, 32] reshape { shape: [1, 3, 32, 32] }",
            '"output0" data_type: TYPE_FP32 dims: [5, 2] reshape { shape: [1, 5, 2] }',
            DETECT,
        ),
    ),
}
CLASSIFIERS = ["cls_leading_one", "cls_reshape"]
DETECTORS = ["det_leading_one", "det_reshape"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("fixed_batch") / "models"
    for name, (build, text) in MODELS.items():
        build(repo / name)
        (repo / name / "config.pbtxt").write_text(text)
    running = start_server(repo, repo.parent / "server.log")
    yield running
    running.stop()


def png(colour: tuple[int, int, int], size: tuple[int, int] = (20, 12)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def execution_count(server: RunningServer, model: str) -> int:
    stats = thttp.InferenceServerClient(server.http_url).get_inference_statistics(model)
    return int(stats["model_stats"][0]["execution_count"])


@pytest.mark.parametrize("model", CLASSIFIERS)
def test_classify_runs_one_image_per_execution(server: RunningServer, model: str) -> None:
    before = execution_count(server, model)
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        response = client.post(
            f"/v2/models/{model}/classify",
            files=[("images", (f"{i}.png", png(c), "image/png")) for i, c in enumerate(COLOURS)],
        )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["classes"][0]["index"] for r in results] == [0, 1, 2]
    for result, colour in zip(results, COLOURS, strict=True):
        scores = {c["index"]: c["score"] for c in result["classes"]}
        assert np.allclose([scores[i] for i in range(3)], np.array(colour) / 255.0, atol=1e-6)
    assert execution_count(server, model) - before == len(COLOURS)


@pytest.mark.parametrize("model", DETECTORS)
def test_detect_maps_boxes_back_through_a_fixed_batch_model(server: RunningServer, model: str) -> None:
    """A 64x32 image letterboxed into 32x32 (scale 0.5, 8 rows of padding on top): the input box
    (12, 12, 20, 20) is (24, 8, 40, 24) in the caller's pixels."""
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        response = client.post(
            f"/v2/models/{model}/detect",
            files=[("images", (f"{i}.png", png((9, 9, 9), (64, 32)), "image/png")) for i in range(2)],
        )
    assert response.status_code == 200, response.text
    for result in response.json()["results"]:
        (found,) = result["detections"]
        assert np.allclose(found["box"], [24.0, 8.0, 40.0, 24.0]) and found["score"] == pytest.approx(0.9)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", CLASSIFIERS)
def test_encoded_images_as_a_bytes_input(server: RunningServer, model: str, protocol: str) -> None:
    """One image gives the declared output shape; several run one execution each, stacked."""
    module = thttp if protocol == "http" else tgrpc
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    declared = (1, 3) if model == "cls_leading_one" else (3,)
    for colours, shape in (([COLOURS[1]], declared), (COLOURS, (3, 3))):
        tensor = module.InferInput("x", [len(colours)], "BYTES")
        tensor.set_data_from_numpy(np.array([png(c) for c in colours], dtype=object))
        before = execution_count(server, model)
        scores = client.infer(model, [tensor]).as_numpy("scores")
        assert scores.shape == shape
        assert np.allclose(scores.reshape(len(colours), 3), np.array(colours) / 255.0, atol=1e-6)
        assert execution_count(server, model) - before == len(colours)


def test_tensor_input_still_takes_the_declared_shape(server: RunningServer) -> None:
    client = thttp.InferenceServerClient(server.http_url)
    x = np.random.default_rng(0).random((3, 16, 16), dtype=np.float32)
    tensor = thttp.InferInput("x", [3, 16, 16], "FP32")
    tensor.set_data_from_numpy(x)
    scores = client.infer("cls_reshape", [tensor]).as_numpy("scores")
    assert scores.shape == (3,) and np.allclose(scores, x.mean(axis=(1, 2)), atol=1e-6)


def test_metadata_advertises_the_encoded_image_input(server: RunningServer) -> None:
    """REST metadata and gRPC ModelMetadata (Ferry's field 1000) name the BYTES input; tritonclient,
    which does not know the field, still reads the tensor inputs."""
    expected = {"image_input": "x", "image_datatype": "BYTES", "image_shape": "[-1]", "image_task": "detect"}
    rest = httpx.get(f"http://{server.http_url}/v2/models/det_reshape").json()
    assert rest["parameters"] == expected
    assert rest["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [3, 32, 32]}]
    grpc_metadata = GrpcClient(server.grpc_url).model_metadata("det_reshape")
    assert grpc_metadata["parameters"] == expected  # plain values, as REST (ferry_client unwraps them)
    triton = tgrpc.InferenceServerClient(server.grpc_url).get_model_metadata("cls_leading_one", as_json=True)
    assert triton["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["1", "3", "16", "16"]}]
