"""The response cache through a real server, seen with the official tritonclient's statistics."""

from __future__ import annotations

import itertools
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from ..conftest import MODEL_REPO, RunningServer, start_server
from .triton_helpers import Triton, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CACHE_SIZE = 1 << 20
_values = itertools.count(1)


@pytest.fixture(scope="module")
def cached_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """ "simple" and "digits" with response_cache enabled; "uncached" is "simple" without it."""
    repo = tmp_path_factory.mktemp("cache") / "models"
    for name in ("simple", "digits"):
        shutil.copytree(MODEL_REPO / name, repo / name)
        with open(repo / name / "config.pbtxt", "a") as config:
            config.write("\nresponse_cache { enable: true }\n")
    shutil.copytree(MODEL_REPO / "simple", repo / "uncached")
    config = repo / "uncached" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "simple"', 'name: "uncached"'))
    running = start_server(repo, repo.parent / "server.log", "--cache-size", str(CACHE_SIZE))
    yield running
    running.stop()


@pytest.fixture(params=["http", "grpc"])
def triton(request, cached_server: RunningServer) -> Triton:
    return connect(request.param, cached_server)


def stats(triton: Triton, model: str) -> dict[str, int]:
    """Counts of the model's statistics that matter here, as numbers on both protocols."""
    raw = (
        triton.client.get_inference_statistics(model, as_json=True)
        if triton.protocol == "grpc"
        else (triton.client.get_inference_statistics(model))
    )
    entry = raw["model_stats"][0]
    infer = entry["inference_stats"]
    count = {key: int(infer.get(key, {}).get("count", 0)) for key in ("success", "cache_hit", "cache_miss")}
    return {**count, "executions": int(entry.get("execution_count", 0))}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before}


def simple_inputs() -> dict[str, np.ndarray]:
    """Inputs no other test sends, so the first request is always a miss."""
    value = next(_values)
    return {"INPUT0": np.full((1, 16), value, np.int32), "INPUT1": np.arange(16, dtype=np.int32).reshape(1, 16)}


def test_repeated_request_is_answered_from_the_cache(triton: Triton) -> None:
    arrays = simple_inputs()
    before = stats(triton, "simple")
    first = triton.infer("simple", arrays, ["OUTPUT0", "OUTPUT1"])
    second = triton.infer("simple", arrays, ["OUTPUT0", "OUTPUT1"])
    for name in ("OUTPUT0", "OUTPUT1"):
        np.testing.assert_array_equal(first.as_numpy(name), second.as_numpy(name))
    np.testing.assert_array_equal(second.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])
    assert delta(before, stats(triton, "simple")) == {"success": 2, "cache_hit": 1, "cache_miss": 1, "executions": 1}


def test_other_outputs_or_inputs_miss(triton: Triton) -> None:
    arrays = simple_inputs()
    before = stats(triton, "simple")
    triton.infer("simple", arrays, ["OUTPUT0"])
    only_second = triton.infer("simple", arrays, ["OUTPUT1"])  # a different request: its own entry
    np.testing.assert_array_equal(only_second.as_numpy("OUTPUT1"), arrays["INPUT0"] - arrays["INPUT1"])
    triton.infer("simple", simple_inputs(), ["OUTPUT0"])
    assert delta(before, stats(triton, "simple")) == {"success": 3, "cache_hit": 0, "cache_miss": 3, "executions": 3}


def test_model_without_response_cache_always_executes(triton: Triton) -> None:
    arrays = simple_inputs()
    before = stats(triton, "uncached")
    triton.infer("uncached", arrays, ["OUTPUT0"])
    triton.infer("uncached", arrays, ["OUTPUT0"])
    assert delta(before, stats(triton, "uncached")) == {"success": 2, "cache_hit": 0, "cache_miss": 0, "executions": 2}


def test_same_encoded_image_hits_before_decoding(cached_server: RunningServer, digit_pngs) -> None:
    files, labels = digit_pngs
    triton = connect("grpc", cached_server)
    tensor = triton.module.InferInput("input", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([files[0]], dtype=object))
    before = stats(triton, "digits")
    first = triton.client.infer("digits", [tensor]).as_numpy("logits")
    second = triton.client.infer("digits", [tensor]).as_numpy("logits")
    np.testing.assert_array_equal(first, second)
    assert int(first.argmax()) == int(labels[0])
    assert delta(before, stats(triton, "digits")) == {"success": 2, "cache_hit": 1, "cache_miss": 1, "executions": 1}

    before = stats(triton, "digits")
    with httpx.Client(base_url=f"http://{cached_server.http_url}", timeout=60) as client:
        answers = [
            client.post("/v2/models/digits/classify?top_k=2", content=files[1], headers={"Content-Type": "image/png"})
            for _ in range(2)
        ]
        other_k = client.post("/v2/models/digits/classify?top_k=3", content=files[1])
    assert [a.status_code for a in answers] == [200, 200] and other_k.status_code == 200
    assert answers[0].json() == answers[1].json()
    assert len(other_k.json()["results"][0]["classes"]) == 3
    assert delta(before, stats(triton, "digits"))["cache_hit"] == 1
    assert delta(before, stats(triton, "digits"))["executions"] == 2


def test_cache_metrics(cached_server: RunningServer) -> None:
    triton = connect("http", cached_server)
    arrays = simple_inputs()
    for _ in range(2):
        triton.infer("simple", arrays, ["OUTPUT0"])
    with urllib.request.urlopen(f"http://127.0.0.1:{cached_server.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("nv_cache_")
    }
    assert values['nv_cache_num_hits_per_model{model="simple",version="1"}'] >= 1
    assert values['nv_cache_num_misses_per_model{model="simple",version="1"}'] >= 1
    assert values['nv_cache_hit_duration_per_model{model="simple",version="1"}'] > 0
    assert not any('model="uncached"' in key for key in values)
    assert values["nv_cache_num_entries"] >= 1
    assert 0 < values["nv_cache_util"] <= 1
    assert values["nv_cache_num_hits"] >= 1


def test_enabled_model_on_a_server_without_cache_warns_and_executes(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    with open(repo / "simple" / "config.pbtxt", "a") as config:
        config.write("\nresponse_cache { enable: true }\n")
    running = start_server(repo, tmp_path / "server.log")
    try:
        triton = connect("grpc", running)
        arrays = simple_inputs()
        for _ in range(2):
            triton.infer("simple", arrays, ["OUTPUT0"])
        assert stats(triton, "simple") == {"success": 2, "cache_hit": 0, "cache_miss": 0, "executions": 2}
    finally:
        running.stop()
    assert "enables response_cache but the server has no cache (--cache-size 0)" in running.log()
