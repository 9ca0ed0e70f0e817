"""Dynamic batching under real concurrent load, checked response by response, plus /metrics."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from ..conftest import MODEL_REPO
from ..server_metrics import metric, scrape

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REQUESTS = 240


def digits_request(module, rows: int, rng: np.random.Generator):
    x = rng.random((rows, 1, 28, 28), dtype=np.float32)
    tensor = module.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return x, [tensor]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_are_batched_and_each_answer_is_right(server, protocol: str) -> None:
    reference = ort.InferenceSession(str(MODEL_REPO / "digits" / "1" / "model.onnx"))
    module = thttp if protocol == "http" else tgrpc
    url = server.http_url if protocol == "http" else server.grpc_url
    before = _stats(server)

    def one(seed: int) -> float:
        rng = np.random.default_rng(seed)
        client = module.InferenceServerClient(url, **({"concurrency": 1} if protocol == "http" else {}))
        worst = 0.0
        for _ in range(REQUESTS // 24):
            rows = int(rng.integers(1, 4))
            x, inputs = digits_request(module, rows, rng)
            logits = client.infer("digits", inputs).as_numpy("logits")
            expected = reference.run(None, {"input": x})[0]
            assert logits.shape == (rows, 10)
            worst = max(worst, float(np.abs(logits - expected).max()))
        client.close()
        return worst

    with ThreadPoolExecutor(24) as pool:
        worst = max(pool.map(one, range(24)))
    assert worst < 1e-4
    after = _stats(server)
    executions = after["execution_count"] - before["execution_count"]
    items = after["inference_count"] - before["inference_count"]
    assert (
        int(after["inference_stats"]["success"]["count"]) - int(before["inference_stats"]["success"]["count"])
        == REQUESTS
    )
    assert executions < REQUESTS  # requests shared executions
    assert any(int(b["batch_size"]) > 3 for b in after["batch_stats"])  # more items than any one request had
    assert items >= REQUESTS


def _stats(server) -> dict:
    client = thttp.InferenceServerClient(server.http_url)
    return client.get_inference_statistics("digits")["model_stats"][0]


def test_metrics_match_statistics(server) -> None:
    client = thttp.InferenceServerClient(server.http_url)
    x = np.ones((2, 16), np.float32)
    inputs = [thttp.InferInput(n, [2, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(x)
    for _ in range(3):
        client.infer("simple_fp32", inputs)
    bad = [thttp.InferInput("INPUT0", [2, 16], "FP32")]
    bad[0].set_data_from_numpy(x)
    with pytest.raises(Exception, match="missing required input"):
        client.infer("simple_fp32", bad)
    stats = client.get_inference_statistics("simple_fp32")["model_stats"][0]
    text = scrape(server)
    labels = {"model": "simple_fp32", "version": "1"}
    success = metric(text, "nv_inference_request_success", **labels)
    assert success == int(stats["inference_stats"]["success"]["count"]) >= 3
    assert metric(text, "nv_inference_request_failure", reason="OTHER", **labels) >= 1
    assert metric(text, "nv_inference_count", **labels) == stats["inference_count"]
    assert metric(text, "nv_inference_exec_count", **labels) == stats["execution_count"]
    assert metric(text, "nv_inference_request_duration_us", **labels) == pytest.approx(
        int(stats["inference_stats"]["success"]["ns"]) / 1000, rel=1e-6
    )
    assert metric(text, "nv_inference_queue_duration_us", **labels) > 0
    assert metric(text, "nv_inference_compute_infer_duration_us", **labels) > 0
    assert metric(text, "nv_inference_request_duration_histogram_us_count", **labels) == success
    assert metric(text, "nv_inference_batch_size_count", **labels) == stats["execution_count"]
    assert metric(text, "nv_inference_batch_size_sum", **labels) == stats["inference_count"]
    assert metric(text, "nv_inference_pending_request_count", **labels) == 0
    assert metric(text, "nv_model_load_duration_secs", **labels) > 0
    for host_metric in ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"):
        assert re.search(rf"^{host_metric} \S+$", text, re.M), host_metric
