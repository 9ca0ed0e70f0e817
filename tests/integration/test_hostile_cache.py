"""The response cache under attack (issue 24): a model replaced under the same version must never be
answered from the old model's cache, and the cache's byte bound must bound the memory it holds.

Both process modes: with intake processes the cache lives in the model process and requests reach
it through the hand-off, so the same attacks are made through an intake.
"""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.http as triton_http

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model
from ..server_metrics import metric, scrape

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

WIDTH = 16
CACHE_BYTES = 16 * 2**20
#: 256 Ki empty BYTES elements: 0 bytes by their lengths, ~10 MB as Python objects.
ELEMENTS = 2**18
PYTHON_MODELS = Path(__file__).parent / "python_models"


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def cached(request, tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_cache") / "models"
    write_mlp_model(repo / "quick", width=WIDTH, layers=1, extra_config="response_cache { enable: true }\n")
    shutil.copytree(PYTHON_MODELS / "identity_bytes", repo / "strings")
    config = repo / "strings" / "config.pbtxt"
    config.write_text(config.read_text() + 'name: "strings"\nresponse_cache { enable: true }\n')
    extra = ["--intake-processes", "2"] if request.param == "2 intake processes" else []
    running = start_server(
        repo,
        repo.parent / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--cache-size",
        str(CACHE_BYTES),
        "--allow-python-models",
        *extra,
    )
    yield running
    running.stop()


def _infer(server: RunningServer, x: np.ndarray) -> np.ndarray:
    client = triton_http.InferenceServerClient(server.http_url)
    inputs = [triton_http.InferInput("x", list(x.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    return client.infer("quick", inputs).as_numpy("y")


def _hits(server: RunningServer) -> float:
    return metric(scrape(server), "nv_cache_num_hits")


def test_a_model_replaced_under_the_same_version_is_never_answered_from_the_cache(cached) -> None:
    x = np.arange(WIDTH, dtype=np.float32).reshape(1, WIDTH) + 0.5
    np.testing.assert_array_equal(_infer(cached, x), x)  # offset 0
    hits = _hits(cached)
    np.testing.assert_array_equal(_infer(cached, x), x)
    assert _hits(cached) == hits + 1  # the attack's premise: this answer is served from the cache
    # the attack: another model file under the same version, then a reload
    write_mlp_model(
        cached.repository / "quick", width=WIDTH, layers=1, offset=1.0, extra_config="response_cache { enable: true }\n"
    )
    request = urllib.request.Request(f"http://{cached.http_url}/v2/repository/models/quick/load", method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
    hits = _hits(cached)
    np.testing.assert_array_equal(_infer(cached, x), x + 1.0)  # the new model answers, not the cache
    assert _hits(cached) == hits
    np.testing.assert_array_equal(_infer(cached, x), x + 1.0)  # and its own answers are cached again
    assert _hits(cached) == hits + 1


def _model_process_rss(server: RunningServer) -> int:
    return psutil.Process(server.process.pid).memory_info().rss


def test_bytes_outputs_are_counted_by_the_memory_they_hold(cached, request) -> None:
    """The cache's sizes are the same code in both modes; one process suffices (through intakes a
    million BYTES elements take minutes to hand off on a 2-core machine).

    6 different requests of 256 Ki empty strings: by length each is 0 bytes, so all were kept;
    counted by what they hold (~10 MB each), one fits at a time in 16 MiB. RSS is measured by the
    unit test (tests/unit/test_cache_memory.py), where 100k entries take a second."""
    if "intake" in request.node.callspec.params["cached"]:
        pytest.skip("the cache's accounting does not depend on the process mode")
    client = triton_http.InferenceServerClient(cached.http_url, network_timeout=120)

    def send(tag: int) -> None:
        strings = np.full((1, ELEMENTS), b"", dtype=object)
        strings[0, 0] = str(tag).encode()  # a different key each time
        inputs = [triton_http.InferInput("INPUT0", list(strings.shape), "BYTES")]
        inputs[0].set_data_from_numpy(strings)
        out = client.infer("strings", inputs).as_numpy("OUTPUT0")
        assert out.shape == (1, ELEMENTS) and out[0, 0] == str(tag).encode()

    send(-1)  # the first request's one-off costs (python model stub, buffers) before measuring
    before = _model_process_rss(cached)
    entries = metric(scrape(cached), "nv_cache_num_entries")
    for tag in range(6):
        send(tag)
    grown = _model_process_rss(cached) - before
    utilization = metric(scrape(cached), "nv_cache_util")
    print(f"model process RSS +{grown / 2**20:.0f} MiB, cache {utilization:.0%} full")
    assert metric(scrape(cached), "nv_cache_num_entries") <= entries + 1  # one at a time fits
    assert utilization <= 1.0
    assert grown < 60 * 2**20, f"model process RSS grew {grown / 2**20:.0f} MiB with a 16 MiB cache"
