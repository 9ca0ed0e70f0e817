"""Triton ensembles through a real server, driven by the unmodified tritonclient (HTTP, gRPC, stream)."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from ..conftest import RunningServer, start_server
from ..ensembles.repo import add_ensemble, add_simple, add_sub_twice, scheduling, step, tensors
from .test_batching import metric, scrape
from .triton_helpers import Triton, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CONCURRENT = 8
# A batch forms exactly when CONCURRENT requests are queued; the delay is only a safety net.
GATHER_ALL = f"dynamic_batching {{ preferred_batch_size: [ {CONCURRENT} ] max_queue_delay_microseconds: 60000000 }}\n"


#: One step whose ensemble inputs take any length ([-1] fits the step's [16] at load): a request the
#: ensemble accepts can still be wrong for the step, which only the step's own validation sees.
LOOSE = (
    "max_batch_size: 8\n"
    + tensors("input", "A", "B", dims="-1")
    + tensors("output", "SUM", "DIFF")
    + scheduling(step("simple", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}))
)


@pytest.fixture(scope="module")
def ensemble_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo: Path = tmp_path_factory.mktemp("ensembles") / "models"
    add_simple(repo, "simple", extra_config="dynamic_batching { }\n")
    add_ensemble(repo, "twice", add_sub_twice())
    add_simple(repo, "gathering", extra_config=GATHER_ALL)
    add_ensemble(repo, "gathering_twice", add_sub_twice("gathering"))
    add_ensemble(repo, "loose", LOOSE)
    running = start_server(repo, repo.parent / "server.log", "--model-control-mode", "explicit", "--load-model", "*")
    yield running
    running.stop()


@pytest.fixture(params=["http", "grpc"])
def triton(request, ensemble_server) -> Triton:
    return connect(request.param, ensemble_server)


def _ab(rows: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "A": rng.integers(-500, 500, (rows, 16), dtype=np.int32),
        "B": rng.integers(-500, 500, (rows, 16), dtype=np.int32),
    }


def test_ensemble_answers_and_describes_itself(triton: Triton) -> None:
    arrays = _ab(3, 0)
    result = triton.infer("twice", arrays)
    np.testing.assert_array_equal(result.as_numpy("TWICE_A"), 2 * arrays["A"])
    np.testing.assert_array_equal(result.as_numpy("TWICE_B"), 2 * arrays["B"])
    only = triton.infer("twice", arrays, outputs=["TWICE_B"])
    assert only.as_numpy("TWICE_A") is None
    np.testing.assert_array_equal(only.as_numpy("TWICE_B"), 2 * arrays["B"])
    assert triton.client.is_model_ready("twice")
    metadata = triton.client.get_model_metadata("twice")
    platform = metadata["platform"] if triton.protocol == "http" else metadata.platform
    assert platform == "ensemble"
    config = triton.client.get_model_config("twice")
    if triton.protocol == "http":
        steps = [s["model_name"] for s in config["ensemble_scheduling"]["step"]]
    else:
        steps = [s.model_name for s in config.config.ensemble_scheduling.step]
    assert steps == ["simple", "simple"]


def test_ensemble_bad_input_is_refused_with_the_ensemble_name(triton: Triton) -> None:
    arrays = {"A": np.zeros((1, 16), np.int32), "B": np.zeros((1, 15), np.int32)}
    triton.expect_error(
        "invalid",
        "input 'B' of model 'twice': expected shape [-1, 16] (batch first), got [1, 15]",
        triton.infer,
        "twice",
        arrays,
    )


def test_a_step_validates_its_request_and_names_its_model(triton: Triton) -> None:
    """The ensemble accepts B of [1, 5] (its inputs are [-1]); the step's request through the request
    path is checked against the step model's config, refused as the caller's error (400 /
    INVALID_ARGUMENT) naming the ensemble, the step and the model, before any engine sees it."""
    arrays = {"A": np.zeros((1, 16), np.int32), "B": np.zeros((1, 5), np.int32)}
    message = triton.expect_error(
        "invalid", "ensemble 'loose' step 0 (model 'simple'): ", triton.infer, "loose", arrays
    )
    assert message.endswith("input 'INPUT1' of model 'simple': expected shape [-1, 16] (batch first), got [1, 5]")
    good = _ab(2, 9)
    np.testing.assert_array_equal(triton.infer("loose", good).as_numpy("SUM"), good["A"] + good["B"])


def test_a_traced_ensemble_request_has_a_span_per_step(tmp_path: Path) -> None:
    """Each step is a request of its step model through the request path, so tracing that model
    traces the step: one ``InferRequest`` span per step (here both steps run ``simple``), beside
    the ensemble's own."""
    repo = tmp_path / "models"
    add_simple(repo, "simple")
    add_ensemble(repo, "twice", add_sub_twice())
    trace_file = tmp_path / "trace.jsonl"
    server = start_server(repo, tmp_path / "server.log", "--trace-file", str(trace_file))
    try:
        client = thttp.InferenceServerClient(server.http_url)
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
        arrays = _ab(3, 4)
        result = connect("http", server).infer("twice", arrays, request_id="traced")
        np.testing.assert_array_equal(result.as_numpy("TWICE_A"), 2 * arrays["A"])
        client.close()
    finally:
        server.stop()  # flushes the batched spans
    spans = [json.loads(line) for line in trace_file.read_text().splitlines()]
    roots = [s["attributes"]["triton.model_name"] for s in spans if s["name"] == "InferRequest"]
    assert sorted(roots) == ["simple", "simple", "twice"]
    steps = [s for s in spans if s["name"] == "infer" and s["parent_id"]]
    assert len(steps) == 3  # each request, the steps' too, has its scheduler's stages


def test_grpc_stream_through_an_ensemble(ensemble_server: RunningServer) -> None:
    client = tgrpc.InferenceServerClient(ensemble_server.grpc_url)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    sent = {}
    for index in range(5):
        arrays = _ab(index + 1, index)
        inputs = []
        for name, array in arrays.items():
            tensor = tgrpc.InferInput(name, list(array.shape), "INT32")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        client.async_stream_infer("twice", inputs, request_id=str(index))
        sent[str(index)] = arrays
    for _ in sent:
        result, error = answers.get(timeout=60)
        assert error is None
        arrays = sent[result.get_response().id]
        np.testing.assert_array_equal(result.as_numpy("TWICE_A"), 2 * arrays["A"])
    client.stop_stream()
    client.close()


def test_concurrent_ensemble_requests_batch_at_every_step(ensemble_server: RunningServer) -> None:
    def one(seed: int) -> None:
        client = thttp.InferenceServerClient(ensemble_server.http_url, network_timeout=120)
        arrays = _ab(1, 100 + seed)
        inputs = []
        for name, array in arrays.items():
            tensor = thttp.InferInput(name, list(array.shape), "INT32")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        result = client.infer("gathering_twice", inputs)
        np.testing.assert_array_equal(result.as_numpy("TWICE_B"), 2 * arrays["B"])
        client.close()

    with ThreadPoolExecutor(CONCURRENT) as pool:
        list(pool.map(one, range(CONCURRENT)))
    client = thttp.InferenceServerClient(ensemble_server.http_url)
    step_model = client.get_inference_statistics("gathering")["model_stats"][0]
    ensemble = client.get_inference_statistics("gathering_twice")["model_stats"][0]
    # Both steps ran each of their batches once for all eight requests: 2 executions, 16 items.
    assert step_model["execution_count"] == 2
    assert step_model["inference_count"] == 2 * CONCURRENT
    assert [b["batch_size"] for b in step_model["batch_stats"]] == [CONCURRENT]
    assert ensemble["inference_stats"]["success"]["count"] == CONCURRENT
    assert ensemble["inference_count"] == CONCURRENT
    text = scrape(ensemble_server)
    assert metric(text, "nv_inference_request_success", model="gathering_twice", version="1") == CONCURRENT
    assert metric(text, "nv_inference_exec_count", model="gathering", version="1") == 2


def test_unload_dependents_over_both_protocols(ensemble_server: RunningServer) -> None:
    for protocol in ("http", "grpc"):
        triton = connect(protocol, ensemble_server)
        triton.client.unload_model("simple")
        assert not triton.client.is_model_ready("twice")
        triton.expect_error(
            "unavailable", "ensemble 'twice' step 0 (model 'simple') is not ready", triton.infer, "twice", _ab(1, 1)
        )
        triton.client.load_model("simple")
        assert triton.client.is_model_ready("twice")  # back with its composing model
        triton.client.unload_model("simple", unload_dependents=True)
        index = {row["name"]: row for row in _index(ensemble_server)}
        assert index["twice"]["state"] == "UNAVAILABLE"
        assert index["twice"]["reason"] == "unloaded with 'simple' (unload_dependents)"
        triton.client.load_model("twice")  # loads 'simple' again too
        assert triton.client.is_model_ready("simple")
        np.testing.assert_array_equal(triton.infer("twice", _ab(2, 2)).as_numpy("TWICE_A"), 2 * _ab(2, 2)["A"])


def test_unload_dependents_must_be_a_bool(ensemble_server: RunningServer) -> None:
    response = httpx.post(
        f"http://{ensemble_server.http_url}/v2/repository/models/simple/unload",
        json={"parameters": {"unload_dependents": "yes"}},
    )
    assert response.status_code == 400
    assert response.json() == {"error": "parameter 'unload_dependents' must be true or false"}
    assert thttp.InferenceServerClient(ensemble_server.http_url).is_model_ready("twice")


def _index(server: RunningServer) -> list[dict]:
    return thttp.InferenceServerClient(server.http_url).get_model_repository_index()
