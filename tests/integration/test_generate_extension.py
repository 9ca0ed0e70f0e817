"""Triton's generate extension and request parameters, in the situation of Triton's own generate
tests (``L0_http/generate_endpoint_test.py`` and its model ``mock_llm``): a decoupled Python model
whose PROMPT and STREAM inputs have dims [1, 1], steered by request parameters, placed by
``instance_group { kind: KIND_MODEL }``. The expected statuses, messages and behaviour are
Triton's. Every test runs against one server process and against two intake processes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from hypothesis import given, settings
from hypothesis import strategies as st

from ..conftest import RunningServer, start_server

MODELS = Path(__file__).parent / "decoupled_models"
MODEL = "mock_generate"
PLAIN = "mock_generate_plain"  # the same model, not decoupled


@pytest.fixture(scope="module", params=["one_process", "intakes"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp(f"generate_{request.param}") / "models"
    shutil.copytree(MODELS / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(repo / MODEL, repo / PLAIN)
    config = repo / PLAIN / "config.pbtxt"
    config.write_text(config.read_text().replace("model_transaction_policy { decoupled: true }\n", ""))
    intakes = ("--intake-processes", "2") if request.param == "intakes" else ()
    running = start_server(repo, repo.parent / "server.log", "--allow-python-models", *intakes)
    yield running
    running.stop()


def _post(server: RunningServer, endpoint: str, body: dict | str, model: str = MODEL) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(f"http://{server.http_url}/v2/models/{model}/{endpoint}", content=content, timeout=30)


def _events(response: httpx.Response) -> list[dict]:
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8", response.text
    return [json.loads(line[len("data: ") :]) for line in response.text.split("\n\n") if line.startswith("data: ")]


def _error(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


def test_the_model_placed_by_kind_model_loads(server: RunningServer) -> None:
    config = httpx.get(f"http://{server.http_url}/v2/models/{MODEL}/config", timeout=10).json()
    assert config["instance_group"][0]["kind"] == "KIND_MODEL"
    assert httpx.get(f"http://{server.http_url}/v2/models/{MODEL}/ready", timeout=10).status_code == 200


def test_values_are_filled_into_the_inputs_declared_shape(server: RunningServer) -> None:
    answer = _post(server, "generate", {"PROMPT": "hello world", "STREAM": False})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {"model_name": MODEL, "model_version": "1", "TEXT": "hello world"}
    both = _post(server, "generate", {"PROMPT": ["hello world"], "STREAM": [False], "input_ids": [1, 2, 3]})
    assert both.status_code == 200 and both.json()["TEXT"] == "hello world", both.text
    empty = _post(server, "generate", {"PROMPT": "hello", "STREAM": False, "OUTPUT_0_DIM": True})
    assert empty.status_code == 200 and empty.json()["TEXT"] == [], empty.text
    misfit = _post(server, "generate", {"PROMPT": ["a", "b"], "STREAM": False})
    assert "The schema can not convert input 'PROMPT' to tensor with proper shape" in _error(misfit)


def test_extra_keys_and_nested_parameters_steer_the_model(server: RunningServer) -> None:
    for body in (
        {"PROMPT": ["hello world"], "STREAM": True, "REPETITION": 3},
        {"PROMPT": ["hello world"], "STREAM": True, "parameters": {"REPETITION": 3}},
    ):
        events = _events(_post(server, "generate_stream", body))
        assert [event["TEXT"] for event in events] == ["hello world"] * 3
    failing = _events(_post(server, "generate_stream", {"PROMPT": "hi", "STREAM": True, "FAIL_LAST": True}))
    assert failing == [{"model_name": MODEL, "model_version": "1", "TEXT": "hi"}, {"error": "An Error Occurred"}]


def test_answers_carry_the_request_id(server: RunningServer) -> None:
    with_id = _post(server, "generate", {"PROMPT": "hello world", "id": "42", "STREAM": False})
    assert with_id.status_code == 200 and with_id.json()["id"] == "42", with_id.text
    assert with_id.json()["TEXT"] == "hello world"
    for body in ({"PROMPT": "hello world", "STREAM": False}, {"PROMPT": "hello world", "id": "", "STREAM": False}):
        answer = _post(server, "generate", body)
        assert answer.status_code == 200 and "id" not in answer.json(), answer.text
    events = _events(_post(server, "generate_stream", {"PROMPT": "x", "STREAM": True, "REPETITION": 2, "id": "s"}))
    assert [event["id"] for event in events] == ["s", "s"]


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_a_key_given_twice_is_refused(server: RunningServer, endpoint: str) -> None:
    for body, repeated in (
        ('{"PROMPT": "hello", "STREAM": false, "PROMPT": "duplicate"}', "PROMPT"),
        ('{"PROMPT": "hello", "STREAM": false, "STREAM": false}', "STREAM"),
        ('{"PROMPT": "hello", "STREAM": false, "PROMPT": "duplicate", "STREAM": true}', "PROMPT"),
        ('{"PROMPT": "hello", "STREAM": false, "STREAM": true, "PROMPT": "duplicate"}', "STREAM"),
    ):
        assert f"input '{repeated}' already exists in request" in _error(_post(server, endpoint, body))


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_errors_in_tritons_words(server: RunningServer, endpoint: str) -> None:
    for body, got in (({}, 0), ({"abc": 123}, 0), ({"PROMPT": "hello"}, 1), ({"STREAM": False, "other": "p"}, 1)):
        assert f"expected number of inputs between 2 and 3 but got {got}" in _error(_post(server, endpoint, body))
    for body, words in (
        ({"PROMPT": 123, "STREAM": False}, "attempt to access JSON non-string as string"),
        ({"PROMPT": "hello", "STREAM": "false"}, "attempt to access JSON non-boolean as boolean"),
        ({"PROMPT": True, "STREAM": 123}, "attempt to access JSON non-string as string"),
        ({"STREAM": 123, "PROMPT": True}, "attempt to access JSON non-boolean as boolean"),
        ({"PROMPT": {"USER": "hello"}, "STREAM": True}, "attempt to access JSON non-string as string"),
        ({"PROMPT": "x", "STREAM": True, "PARAMS": {"P": 0}}, "parameter 'PARAMS' has invalid type"),
        ({"PROMPT": "x", "STREAM": True, "parameters": 1}, "Expected JSON object for keyword: 'parameters'"),
        (
            {"PROMPT": "x", "STREAM": True, "parameters": {"nested": {"twice": 1}}},
            "Converting keyword: 'parameters': parameter 'nested' has invalid type.",
        ),
    ):
        assert words in _error(_post(server, endpoint, body))
    deep = '{"PROMPT": ' + "[" * 900 + '"x"' + "]" * 900 + ', "STREAM": false}'  # hostile nesting: a 400
    assert _error(_post(server, endpoint, deep))


def test_generate_wants_exactly_one_response(server: RunningServer) -> None:
    for repetition in (0, 2):
        body = {"PROMPT": "hello world", "STREAM": True, "REPETITION": repetition}
        assert len(_events(_post(server, "generate_stream", body))) == repetition
        error = _error(_post(server, "generate", body))
        assert "generate expects model to produce exactly 1 response" in error


def _echoed(text: str) -> dict:
    return json.loads(text)


def test_request_parameters_reach_the_python_model(server: RunningServer) -> None:
    """``request.parameters()`` holds the request's parameters, as JSON, whatever the door: the
    generate extension's extra keys, ``/infer``'s "parameters", gRPC's parameters; the server's
    own (priority, timeout, ...) are not shown, as in Triton."""
    wanted = {"ECHO_PARAMETERS": True, "temperature": 0.5, "user": "ann"}
    generated = _post(server, "generate", {"PROMPT": "x", "STREAM": False, **wanted, "timeout": 5_000_000})
    assert generated.status_code == 200, generated.text
    assert _echoed(generated.json()["TEXT"]) == wanted
    nested = _post(server, "generate", {"PROMPT": "x", "STREAM": False, "parameters": wanted}, model=PLAIN)
    assert _echoed(nested.json()["TEXT"]) == wanted

    prompt = np.array([[b"x"]], dtype=object)
    stream = np.array([[False]])
    for module, url in ((thttp, server.http_url), (tgrpc, server.grpc_url)):
        inputs = [module.InferInput("PROMPT", [1, 1], "BYTES"), module.InferInput("STREAM", [1, 1], "BOOL")]
        inputs[0].set_data_from_numpy(prompt)
        inputs[1].set_data_from_numpy(stream)
        client = module.InferenceServerClient(url)
        result = client.infer(PLAIN, inputs, parameters=wanted)
        assert _echoed(result.as_numpy("TEXT").reshape(-1)[0].decode()) == wanted, module.__name__
    body = {
        "inputs": [
            {"name": "PROMPT", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]},
            {"name": "STREAM", "shape": [1, 1], "datatype": "BOOL", "data": [False]},
        ],
        "parameters": {**wanted, "priority": 1, "binary_data_output": False},
    }
    raw = httpx.post(f"http://{server.http_url}/v2/models/{PLAIN}/infer", json=body, timeout=30)
    assert raw.status_code == 200, raw.text
    assert _echoed(raw.json()["outputs"][0]["data"][0]) == wanted


def test_response_statistics_split_compute_infer_and_output(server: RunningServer) -> None:
    """Each response's time is split where the model sent it (Triton's Python backend): a success
    or failure counts compute_infer and compute_output, an empty final response compute_infer only."""
    events = _events(_post(server, "generate_stream", {"PROMPT": "x", "STREAM": True, "REPETITION": 2}))
    assert len(events) == 2
    stats = httpx.get(f"http://{server.http_url}/v2/models/{MODEL}/stats", timeout=10).json()
    responses = stats["model_stats"][0]["response_stats"]
    for index in ("0", "1", "2"):
        row = responses[index]
        answered = row["success"]["count"] + row["fail"]["count"]
        assert row["compute_infer"]["count"] == answered + row["empty_response"]["count"], (index, row)
        assert row["compute_output"]["count"] == answered, (index, row)
    first = responses["0"]
    assert first["success"]["count"] >= 1 and first["compute_output"]["ns"] > 0 and first["compute_infer"]["ns"] > 0
    assert responses["2"]["empty_response"]["count"] >= 1  # the bare final response of this request


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
#: The model's inputs, the reserved keys and parameters it reads (not REPETITION: a huge count
#: would keep its one instance sending), and a stranger.
KEYS = ["PROMPT", "STREAM", "input_ids", "parameters", "id", "priority", "timeout", "FAIL_LAST", "OUTPUT_0_DIM", "k"]


@settings(max_examples=50)
@given(
    endpoint=st.sampled_from(["generate", "generate_stream"]),
    body=st.dictionaries(st.sampled_from(KEYS), JSON_VALUES, max_size=5),
)
def test_any_json_object_gets_a_deliberate_answer(server: RunningServer, endpoint: str, body: dict) -> None:
    """Whatever the values, the answer is the model's or a 400 that says why, never a 5xx."""
    answer = _post(server, endpoint, body)
    assert answer.status_code in (200, 400), (body, answer.status_code, answer.text)
    if answer.status_code == 400:
        assert answer.json()["error"]
