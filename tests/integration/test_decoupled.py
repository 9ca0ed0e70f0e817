"""Decoupled models (any number of responses per request) against a real server: the official
tritonclient's gRPC stream, Triton's generate extension over REST, BLS calls that iterate a
decoupled model's responses, and the errors Triton gives where one response is expected.
The models in ``decoupled_models/`` make the calls of Triton's decoupled examples."""

from __future__ import annotations

import json
import queue
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from ..conftest import RunningServer, start_server
from ..ensembles.repo import add_ensemble, add_simple, scheduling, step, tensors

MODELS = Path(__file__).parent / "decoupled_models"


def build_repository(root: Path) -> Path:
    repo = root / "models"
    add_simple(repo)
    for model in MODELS.iterdir():
        if model.is_dir():
            shutil.copytree(model, repo / model.name, ignore=shutil.ignore_patterns("__pycache__"))
    plain = repo / "mock_generate_plain"  # the same model, not decoupled: /infer and gRPC infer reach it
    shutil.copytree(repo / "mock_generate", plain)
    config = plain / "config.pbtxt"
    config.write_text(config.read_text().replace("model_transaction_policy { decoupled: true }\n", ""))
    io = tensors("input", "N", datatype="TYPE_INT32", dims="1") + tensors(
        "output", "SQUARES", datatype="TYPE_INT32", dims="1"
    )
    add_ensemble(  # the last step is decoupled: the ensemble streams its responses
        repo,
        "plus_one_then_square",
        "max_batch_size: 0\n"
        + io
        + scheduling(step("plus_one", {"IN": "N"}, {"OUT": "M"}), step("square", {"IN": "M"}, {"OUT": "SQUARES"})),
    )
    add_ensemble(  # refused: a step reads the decoupled step's output
        repo,
        "square_then_plus_one",
        "max_batch_size: 0\n"
        + io
        + scheduling(step("square", {"IN": "N"}, {"OUT": "S"}), step("plus_one", {"IN": "S"}, {"OUT": "SQUARES"})),
    )
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = build_repository(tmp_path_factory.mktemp("decoupled"))
    running = start_server(repo, repo.parent / "server.log", "--allow-python-models")
    yield running
    running.stop()


def _input(module, name: str, array: np.ndarray, datatype: str):
    tensor = module.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def repeat_inputs(module, data: np.ndarray, count: int, error_at: int | None = None) -> list:
    inputs = [_input(module, "IN", data, "FP32"), _input(module, "COUNT", np.array([count], dtype=np.int32), "INT32")]
    if error_at is not None:
        inputs.append(_input(module, "ERROR_AT", np.array([error_at], dtype=np.int32), "INT32"))
    return inputs


class Stream:
    """A tritonclient gRPC stream whose callback puts (result, error) on a queue."""

    def __init__(self, server: RunningServer) -> None:
        self.client = tgrpc.InferenceServerClient(server.grpc_url)
        self.results: queue.Queue = queue.Queue()
        self.client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), self.results))

    def until_final(self, request_id: str, timeout: float = 30) -> list[tuple]:
        """Every (result, error) of one request up to the one flagged final."""
        got = []
        while True:
            result, error = self.results.get(timeout=timeout)
            got.append((result, error))
            response = result.get_response() if result is not None else None
            if response is not None and response.id == request_id and _final(response):
                return got

    def close(self) -> None:
        self.client.stop_stream(cancel_requests=True)  # a request left open (never_final) ends here
        self.client.close()


def _final(response) -> bool:
    return response.parameters["triton_final_response"].bool_param


@pytest.fixture
def stream(server: RunningServer) -> Iterator[Stream]:
    opened = Stream(server)
    yield opened
    opened.close()


def test_repeat_streams_every_response_then_the_final_flag(stream: Stream) -> None:
    data = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    stream.client.async_stream_infer(
        "repeat", repeat_inputs(tgrpc, data, 4), request_id="r1", enable_empty_final_response=True
    )
    got = stream.until_final("r1")
    assert [error for _, error in got] == [None] * 5
    data_responses = [result for result, _ in got[:-1]]
    assert [int(r.as_numpy("IDX")[0]) for r in data_responses] == [0, 1, 2, 3]
    for result in data_responses:
        np.testing.assert_array_equal(result.as_numpy("OUT"), data)
        assert not _final(result.get_response())
    final = got[-1][0].get_response()
    assert _final(final) and not final.outputs and final.id == "r1"


def test_an_error_mid_stream_answers_that_response_and_the_stream_goes_on(stream: Stream) -> None:
    data = np.array([7.0], dtype=np.float32)
    stream.client.async_stream_infer(
        "repeat", repeat_inputs(tgrpc, data, 3, error_at=1), request_id="e1", enable_empty_final_response=True
    )
    got = stream.until_final("e1")
    assert len(got) == 4
    assert got[0][1] is None and int(got[0][0].as_numpy("IDX")[0]) == 0
    assert isinstance(got[1][1], InferenceServerException) and "no answer at 1" in got[1][1].message()
    assert got[2][1] is None and int(got[2][0].as_numpy("IDX")[0]) == 2


def test_square_answers_n_times_with_the_last_one_final(stream: Stream) -> None:
    for n in (3, 1):
        stream.client.async_stream_infer(
            "square", [_input(tgrpc, "IN", np.array([n], dtype=np.int32), "INT32")], request_id=f"s{n}"
        )
        got = stream.until_final(f"s{n}")
        assert [int(r.as_numpy("OUT")[0]) for r, _ in got] == [n] * n
        assert [_final(r.get_response()) for r, _ in got] == [False] * (n - 1) + [True]


def test_zero_responses_end_with_an_empty_final_only_when_asked(stream: Stream) -> None:
    zero = [_input(tgrpc, "IN", np.array([0], dtype=np.int32), "INT32")]
    stream.client.async_stream_infer("square", zero, request_id="z-quiet")  # nothing comes back for this one
    stream.client.async_stream_infer("square", zero, request_id="z", enable_empty_final_response=True)
    ((result, error),) = stream.until_final("z")
    assert error is None and not result.get_response().outputs
    assert stream.results.empty()


def test_requests_on_one_stream_run_side_by_side(stream: Stream) -> None:
    """A request to a decoupled model that stays open does not hold up the ones after it."""
    stream.client.async_stream_infer(
        "never_final", [_input(tgrpc, "IN", np.array([5], dtype=np.int32), "INT32")], request_id="open"
    )
    result, error = stream.results.get(timeout=30)
    assert error is None and int(result.as_numpy("OUT")[0]) == 5 and not _final(result.get_response())
    stream.client.async_stream_infer(
        "square", [_input(tgrpc, "IN", np.array([2], dtype=np.int32), "INT32")], request_id="after"
    )
    assert [int(r.as_numpy("OUT")[0]) for r, _ in stream.until_final("after")] == [2, 2]


def test_a_non_decoupled_model_on_the_stream_keeps_its_one_final_response(stream: Stream) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [_input(tgrpc, "INPUT0", a, "INT32"), _input(tgrpc, "INPUT1", a, "INT32")]
    stream.client.async_stream_infer("simple", inputs, request_id="plain")
    ((result, error),) = stream.until_final("plain")
    assert error is None and _final(result.get_response())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)


def test_execute_that_raises_fails_the_request(stream: Stream) -> None:
    stream.client.async_stream_infer(
        "raises", [_input(tgrpc, "IN", np.array([0], dtype=np.int32), "INT32")], request_id="x0"
    )
    result, error = stream.results.get(timeout=30)
    assert "execute() raised RuntimeError: broken on purpose" in error.message()
    stream.client.async_stream_infer(
        "raises", [_input(tgrpc, "IN", np.array([1], dtype=np.int32), "INT32")], request_id="x1"
    )  # one response went out before the failure: it arrives, then the error ends the request
    first, error = stream.results.get(timeout=30)
    assert error is None and int(first.as_numpy("OUT")[0]) == 1
    _, error = stream.results.get(timeout=30)
    assert "broken on purpose" in error.message()


def test_plain_inference_on_a_decoupled_model_gets_tritons_error(server: RunningServer) -> None:
    inputs = [_input(tgrpc, "IN", np.array([1], dtype=np.int32), "INT32")]
    with pytest.raises(InferenceServerException) as caught:
        tgrpc.InferenceServerClient(server.grpc_url).infer("square", inputs)
    assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
    assert caught.value.message() == "ModelInfer RPC doesn't support models with decoupled transaction policy"
    with pytest.raises(InferenceServerException) as caught:
        thttp.InferenceServerClient(server.http_url).infer(
            "square", [_input(thttp, "IN", np.array([1], dtype=np.int32), "INT32")]
        )
    assert caught.value.status() == "501"
    assert "HTTP end point doesn't support models with decoupled transaction policy" in caught.value.message()


def test_bls_iterates_a_decoupled_models_responses(server: RunningServer) -> None:
    client = thttp.InferenceServerClient(server.http_url)
    for model in ("bls_sum", "bls_sum_async"):
        for n in (4, 0):
            result = client.infer(model, [_input(thttp, "N", np.array([n], dtype=np.int32), "INT32")])
            assert int(result.as_numpy("TOTAL")[0]) == n * n and int(result.as_numpy("RESPONSES")[0]) == n


def _sse(text: str) -> list[dict]:
    return [json.loads(line[len("data: ") :]) for line in text.split("\n\n") if line.startswith("data: ")]


def test_generate_and_generate_stream(server: RunningServer) -> None:
    base = f"http://{server.http_url}/v2/models"
    one = httpx.post(f"{base}/repeat/generate", json={"IN": [0.5, 1.5], "COUNT": 1}, timeout=30)
    assert one.status_code == 200, one.text
    assert one.json() == {"model_name": "repeat", "model_version": "1", "OUT": [0.5, 1.5], "IDX": 0}
    many = httpx.post(f"{base}/repeat/generate", json={"IN": [1.0], "COUNT": 3}, timeout=30)
    assert many.status_code == 400 and "generate expects model to produce exactly 1 response" in many.json()["error"]
    streamed = httpx.post(f"{base}/repeat/generate_stream", json={"IN": [2.0], "COUNT": 3, "ERROR_AT": 1}, timeout=30)
    assert streamed.status_code == 200 and streamed.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert _sse(streamed.text) == [
        {"model_name": "repeat", "model_version": "1", "OUT": 2.0, "IDX": 0},
        {"error": "no answer at 1"},
        {"model_name": "repeat", "model_version": "1", "OUT": 2.0, "IDX": 2},
    ]
    plain = httpx.post(f"{base}/bls_sum/generate_stream", json={"N": 3}, timeout=30)  # not decoupled: one event
    assert _sse(plain.text) == [{"model_name": "bls_sum", "model_version": "1", "TOTAL": 9, "RESPONSES": 3}]
    batched = httpx.post(f"{base}/simple/generate", json={"INPUT0": list(range(16)), "INPUT1": [1] * 16}, timeout=30)
    assert batched.json()["OUTPUT0"] == list(range(1, 17))
    missing = httpx.post(f"{base}/repeat/generate_stream", json={"COUNT": 1}, timeout=30)
    assert missing.status_code == 400 and missing.headers["content-type"] == "application/json"
    assert "missing required input(s) ['IN']" in missing.json()["error"]
    unknown = httpx.post(f"{base}/nope/generate", json={}, timeout=30)
    assert unknown.status_code == 404


def test_an_ensemble_ending_in_a_decoupled_step_streams_its_responses(server: RunningServer, stream: Stream) -> None:
    stream.client.async_stream_infer(
        "plus_one_then_square", [_input(tgrpc, "N", np.array([2], dtype=np.int32), "INT32")], request_id="ens"
    )
    got = stream.until_final("ens")
    assert [(int(r.as_numpy("SQUARES")[0]), e) for r, e in got] == [(3, None)] * 3
    config = tgrpc.InferenceServerClient(server.grpc_url).get_model_config("plus_one_then_square").config
    assert config.model_transaction_policy.decoupled
    events = httpx.post(
        f"http://{server.http_url}/v2/models/plus_one_then_square/generate_stream", json={"N": 1}, timeout=30
    )
    assert _sse(events.text) == [{"model_name": "plus_one_then_square", "model_version": "1", "SQUARES": 2}] * 2
    rows = {r["name"]: r for r in httpx.post(f"http://{server.http_url}/v2/repository/index", timeout=10).json()}
    assert rows["square_then_plus_one"]["state"] == "UNAVAILABLE"
    assert (
        "step 0 (model 'square') is decoupled, so it must be the last step, but step 1 (model 'plus_one') reads "
        "its output 'S'" in rows["square_then_plus_one"]["reason"]
    )


def _response_counts(server: RunningServer) -> dict[str, int]:
    stats = httpx.get(f"http://{server.http_url}/v2/models/square/stats", timeout=10).json()["model_stats"][0]
    return {index: entry["success"]["count"] for index, entry in stats["response_stats"].items()}


def _response_metric(server: RunningServer, outcome: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    line = f'ferry_inference_response_count{{model="square",outcome="{outcome}",version="1"}} '
    return next((float(row[len(line) :]) for row in text.splitlines() if row.startswith(line)), 0.0)


def test_statistics_and_metrics_count_each_response(server: RunningServer) -> None:
    before, metric_before = _response_counts(server), _response_metric(server, "success")
    events = httpx.post(f"http://{server.http_url}/v2/models/square/generate_stream", json={"IN": 3}, timeout=30)
    assert len(_sse(events.text)) == 3
    after = _response_counts(server)
    for index in ("0", "1", "2"):
        assert after[index] == before.get(index, 0) + 1
    assert _response_metric(server, "success") == metric_before + 3
    grpc_stats = tgrpc.InferenceServerClient(server.grpc_url).get_inference_statistics("square")
    assert grpc_stats.model_stats[0].response_stats["2"].success.count == after["2"]


def test_streams_through_intake_processes(tmp_path: Path) -> None:
    """With several intake processes an intake serves the stream itself and relays each request to a
    decoupled model to the model process as a stream of its own: in one client stream, a decoupled
    request's three responses, a plain model's answer and an unknown model's error all arrive, each
    answering its own request, and the stream goes on."""
    repo = tmp_path / "models"
    add_simple(repo)
    shutil.copytree(MODELS / "square", repo / "square", ignore=shutil.ignore_patterns("__pycache__"))
    server = start_server(repo, tmp_path / "server.log", "--allow-python-models", "--intake-processes", "2")
    opened = Stream(server)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    plain = [_input(tgrpc, "INPUT0", a, "INT32"), _input(tgrpc, "INPUT1", a, "INT32")]
    try:
        opened.client.async_stream_infer(
            "square", [_input(tgrpc, "IN", np.array([3], dtype=np.int32), "INT32")], request_id="i"
        )
        opened.client.async_stream_infer("simple", plain, request_id="s")
        opened.client.async_stream_infer("nonexistent", plain, request_id="x")
        got = [opened.results.get(timeout=30) for _ in range(5)]  # 3 squares, the sum, the error
        errors = [error for _, error in got if error is not None]
        results = {}
        for result, error in got:
            if error is None:
                results.setdefault(result.get_response().id, []).append(result)
        assert [int(r.as_numpy("OUT")[0]) for r in results["i"]] == [3, 3, 3]
        np.testing.assert_array_equal(results["s"][0].as_numpy("OUTPUT0"), a + a)
        assert len(errors) == 1 and "unknown model" in errors[0].message(), errors
        opened.client.async_stream_infer(
            "square", [_input(tgrpc, "IN", np.array([2], dtype=np.int32), "INT32")], request_id="j"
        )
        assert [int(r.as_numpy("OUT")[0]) for r, _ in opened.until_final("j")] == [2, 2]
        events = httpx.post(f"http://{server.http_url}/v2/models/square/generate_stream", json={"IN": 2}, timeout=30)
        assert _sse(events.text) == [{"model_name": "square", "model_version": "1", "OUT": 2}] * 2
    finally:
        opened.close()
        server.stop()
