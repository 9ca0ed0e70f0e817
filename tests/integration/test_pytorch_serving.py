"""The PyTorch backend in a real server: TorchScript digits (FP32 and FP16) and an onnx2torch-converted
model, over tritonclient HTTP and gRPC under concurrency, checked against the ONNX Runtime digits model
answer by answer, and through the image pipeline."""

from __future__ import annotations

import io
import re
import shutil
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from PIL import Image
from tritonclient.utils import InferenceServerException

from ..conftest import EXTRAS_REPO, MODEL_REPO, RunningServer, start_server

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA (torch.cuda.is_available() is False)")
#: digits_torch is KIND_AUTO: on a GPU its FP32 convolutions use TF32 (torch's default for cuDNN).
FP32_TOLERANCE = 2e-2 if CUDA else 1e-4
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

FP16 = 'parameters { key: "ferry_precision" value: { string_value: "fp16" } }\n'
CONVERTED = """name: "digits_converted"
backend: "pytorch"
max_batch_size: 64
dynamic_batching { }
parameters { key: "ferry_convert_from" value: { string_value: "onnx" } }
"""
CLIENTS = 16
REQUESTS_PER_CLIENT = 8


@pytest.fixture(scope="module")
def torch_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("torch_repo") / "models"
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    shutil.copytree(EXTRAS_REPO / "digits_torch", repo / "digits_torch")
    fp16 = repo / "digits_torch_fp16"
    shutil.copytree(EXTRAS_REPO / "digits_torch", fp16)
    config = (fp16 / "config.pbtxt").read_text().replace('name: "digits_torch"', 'name: "digits_torch_fp16"')
    (fp16 / "config.pbtxt").write_text(config + FP16)
    converted = repo / "digits_converted"
    (converted / "1").mkdir(parents=True)
    shutil.copy(MODEL_REPO / "digits" / "1" / "model.onnx", converted / "1" / "model.onnx")
    (converted / "config.pbtxt").write_text(CONVERTED)
    if CUDA:  # the image pipeline's GPU pre-processing, next to the CPU one of digits_torch
        gpu_pre = repo / "digits_torch_gpu_preprocess"
        shutil.copytree(EXTRAS_REPO / "digits_torch", gpu_pre)
        config = (
            (gpu_pre / "config.pbtxt")
            .read_text()
            .replace('name: "digits_torch"', 'name: "digits_torch_gpu_preprocess"')
        )
        config = config.replace("scale: 0.0039215686 }", "scale: 0.0039215686 device: GPU }")
        (gpu_pre / "config.pbtxt").write_text(config)
    running = start_server(repo, repo.parent / "server.log")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def reference() -> ort.InferenceSession:
    return ort.InferenceSession(str(MODEL_REPO / "digits" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])


def stats(server: RunningServer, model: str) -> dict:
    return thttp.InferenceServerClient(server.http_url).get_inference_statistics(model)["model_stats"][0]


@pytest.mark.parametrize(("model", "tolerance"), [("digits_torch", FP32_TOLERANCE), ("digits_torch_fp16", 0.05)])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_are_batched_and_match_onnxruntime(
    torch_server: RunningServer, reference, protocol: str, model: str, tolerance: float
) -> None:
    module = thttp if protocol == "http" else tgrpc
    url = torch_server.http_url if protocol == "http" else torch_server.grpc_url
    before = stats(torch_server, model)

    def client_loop(seed: int) -> tuple[float, bool]:
        rng = np.random.default_rng(seed)
        client = module.InferenceServerClient(url)
        worst, same_classes = 0.0, True
        for _ in range(REQUESTS_PER_CLIENT):
            x = rng.random((int(rng.integers(1, 4)), 1, 28, 28), dtype=np.float32)
            tensor = module.InferInput("input", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            logits = client.infer(model, [tensor]).as_numpy("logits")
            expected = reference.run(None, {"input": x})[0]
            assert logits.shape == expected.shape and logits.dtype == np.float32
            worst = max(worst, float(np.abs(logits - expected).max()))
            same_classes &= bool((logits.argmax(1) == expected.argmax(1)).all())
        client.close()
        return worst, same_classes

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(client_loop, range(CLIENTS)))
    assert max(worst for worst, _ in results) < tolerance
    assert all(same for _, same in results)
    after = stats(torch_server, model)
    requests = CLIENTS * REQUESTS_PER_CLIENT
    assert (
        int(after["inference_stats"]["success"]["count"]) - int(before["inference_stats"]["success"]["count"])
        == requests
    )
    assert after["execution_count"] - before["execution_count"] < requests  # requests shared executions
    assert any(int(b["batch_size"]) > 3 for b in after["batch_stats"])  # more items than one request has


def test_config_reports_the_backend_and_completed_tensors(torch_server: RunningServer) -> None:
    config = thttp.InferenceServerClient(torch_server.http_url).get_model_config("digits_torch")
    assert config["backend"] == "pytorch" and config["platform"] == "pytorch_libtorch"
    assert [t["name"] for t in config["input"]] == ["input"]


def classify(server: RunningServer, model: str, files: list[bytes]) -> list[list[tuple[str, float]]]:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        response = client.post(
            f"/v2/models/{model}/classify",
            files=[("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(files)],
        )
    assert response.status_code == 200, response.text
    return [[(c["label"], c["score"]) for c in r["classes"]] for r in response.json()["results"]]


def test_images_classified_like_the_onnx_model(torch_server: RunningServer) -> None:
    rng = np.random.default_rng(3)
    files = []
    for _ in range(12):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (20, 24), dtype=np.uint8), mode="L").save(buffer, format="PNG")
        files.append(buffer.getvalue())
    onnx, torch_ = classify(torch_server, "digits", files), classify(torch_server, "digits_torch", files)
    for expected, got in zip(onnx, torch_, strict=True):
        assert [label for label, _ in got] == [label for label, _ in expected]
        assert np.allclose([score for _, score in got], [score for _, score in expected], atol=FP32_TOLERANCE)


@pytest.mark.gpu
@needs_cuda
def test_gpu_preprocessing_classifies_like_the_cpu_path(torch_server: RunningServer) -> None:
    rng = np.random.default_rng(4)
    files = []
    for size in ((8, 8), (20, 24), (64, 48), (300, 200)):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size[1], size[0]), dtype=np.uint8), mode="L").save(buffer, format="PNG")
        files.append(buffer.getvalue())
    cpu = classify(torch_server, "digits_torch", files)
    gpu = classify(torch_server, "digits_torch_gpu_preprocess", files)
    for cpu_classes, gpu_classes in zip(cpu, gpu, strict=True):
        assert cpu_classes[0][0] == gpu_classes[0][0]
        assert abs(cpu_classes[0][1] - gpu_classes[0][1]) < 0.02  # inputs differ by at most a pixel level


@pytest.mark.gpu
@needs_cuda
def test_nvml_gpu_metrics_have_real_values(torch_server: RunningServer) -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install '.[gpu]')")
    with urllib.request.urlopen(f"http://127.0.0.1:{torch_server.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {name: float(value) for name, value in re.findall(r'^(nv_gpu_\w+)\{gpu="0"\} (\S+)$', text, re.M)}
    assert set(values) == {
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
    }, text
    assert 0.0 <= values["nv_gpu_utilization"] <= 1.0
    assert values["nv_gpu_memory_total_bytes"] > 2**30
    assert 0 < values["nv_gpu_memory_used_bytes"] <= values["nv_gpu_memory_total_bytes"]  # our models are resident
    assert values["nv_gpu_power_usage"] > 1.0  # watts


def test_bad_input_is_a_client_error_and_the_model_keeps_serving(torch_server: RunningServer, reference) -> None:
    client = thttp.InferenceServerClient(torch_server.http_url)
    wrong = thttp.InferInput("input", [1, 1, 28, 27], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 1, 28, 27), np.float32))
    with pytest.raises(InferenceServerException, match="input") as info:
        client.infer("digits_torch", [wrong])
    assert info.value.status() == "400"
    x = np.ones((1, 1, 28, 28), np.float32)
    good = thttp.InferInput("input", [1, 1, 28, 28], "FP32")
    good.set_data_from_numpy(x)
    np.testing.assert_allclose(
        client.infer("digits_torch", [good]).as_numpy("logits"),
        reference.run(None, {"input": x})[0],
        atol=FP32_TOLERANCE,
    )


def onnx2torch_error() -> str:
    try:
        import onnx2torch  # noqa: F401
    except Exception as exc:  # torchvision raises RuntimeError when its ops fail to load
        return f"{type(exc).__name__}: {exc}"
    return ""


def test_onnx_model_converted_at_load(torch_server: RunningServer, reference) -> None:
    """Served through onnx2torch where it imports; elsewhere the load fails with a reason naming it."""
    client = thttp.InferenceServerClient(torch_server.http_url)
    rows = {row["name"]: row for row in client.get_model_repository_index()}
    if onnx2torch_error():
        assert rows["digits_converted"]["state"] == "UNAVAILABLE"
        assert "needs onnx2torch, which could not be imported" in rows["digits_converted"]["reason"]
        assert client.is_model_ready("digits_torch")  # one model failing never affects the others
        pytest.skip(f"onnx2torch cannot be imported here ({onnx2torch_error()[:100]}); its load error was checked")
    assert rows["digits_converted"]["state"] == "READY"
    x = np.random.default_rng(5).random((6, 1, 28, 28), dtype=np.float32)
    tensor = thttp.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_allclose(
        client.infer("digits_converted", [tensor]).as_numpy("logits"),
        reference.run(None, {"input": x})[0],
        atol=FP32_TOLERANCE,
    )
