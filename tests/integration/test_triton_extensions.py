"""The logging and trace extensions through the official tritonclient (HTTP and gRPC), on a real
server that writes JSON log lines and exports spans to a file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import numpy as np
import pytest

from ..conftest import MODEL_REPO, RunningServer, start_server
from .triton_helpers import Triton, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def traced_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("traced")
    shutil.copytree(MODEL_REPO / "simple", root / "models" / "simple")
    running = start_server(
        root / "models", root / "server.log", "--log-format", "json", "--trace-file", str(root / "trace.jsonl")
    )
    yield running
    running.stop()


@pytest.fixture(params=["http", "grpc"])
def triton(request, traced_server: RunningServer) -> Triton:
    return connect(request.param, traced_server)


def as_json(triton: Triton, call, *args, **kwargs) -> dict:
    if triton.protocol == "grpc":
        kwargs["as_json"] = True
    answer = call(*args, **kwargs)
    settings = answer.get("settings", answer)
    if triton.protocol == "grpc":  # {"key": {"value": [...]}} or {"key": {"bool_param": ...}}
        settings = {k: (v.get("value") if "value" in v else next(iter(v.values()), "")) for k, v in settings.items()}
    return settings


def test_log_settings_round_trip(triton: Triton) -> None:
    client = triton.client
    settings = as_json(triton, client.get_log_settings)
    assert settings["log_format"] == "json" and settings["log_info"] is True
    updated = as_json(triton, client.update_log_settings, {"log_verbose_level": 1, "log_warning": False})
    assert int(updated["log_verbose_level"]) == 1 and updated["log_warning"] is False
    as_json(triton, client.update_log_settings, {"log_verbose_level": 0, "log_warning": True})
    triton.expect_error(
        "invalid",
        "log file location can not be updated through network protocol",
        client.update_log_settings,
        {"log_file": "/tmp/elsewhere.log"},
    )


def test_trace_settings_global_and_per_model(triton: Triton) -> None:
    client = triton.client
    assert as_json(triton, client.get_trace_settings)["trace_level"] == ["OFF"]
    model = as_json(triton, client.update_trace_settings, "simple", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    assert model["trace_level"] == ["TIMESTAMPS"] and model["trace_rate"] in ("1", ["1"])
    assert as_json(triton, client.get_trace_settings)["trace_level"] == ["OFF"]  # global unchanged
    reset = as_json(triton, client.update_trace_settings, "simple", {"trace_level": None, "trace_rate": None})
    assert reset["trace_level"] == ["OFF"]
    triton.expect_error(
        "invalid",
        "TENSORS (tensor contents in traces) is not supported",
        client.update_trace_settings,
        settings={"trace_level": ["TENSORS"]},
    )
    triton.expect_error(
        "not_found", "Request for unknown model: 'nope' is not found", client.get_trace_settings, "nope"
    )


def test_traced_requests_reach_the_trace_file_and_logs_are_json(traced_server: RunningServer) -> None:
    triton = connect("grpc", traced_server)
    triton.client.update_trace_settings(
        "simple", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "2"}
    )
    a = np.ones((1, 16), np.int32)
    for index in range(3):
        triton.infer("simple", {"INPUT0": a, "INPUT1": a}, request_id=f"traced-{index}")
    triton.client.update_trace_settings("simple", {"trace_level": None, "trace_count": None, "trace_rate": None})
    traced_server.stop()  # flushes the batched spans
    trace_file = traced_server.repository.parent / "trace.jsonl"
    spans = [json.loads(line) for line in trace_file.read_text().splitlines()]
    roots = [s for s in spans if s["name"] == "InferRequest"]
    assert sorted(s["attributes"]["triton.request_id"] for s in roots) == ["traced-0", "traced-1"]  # count 2
    assert sorted(s["name"] for s in spans if s["name"] != "InferRequest") == sorted(
        ["queue", "compute_input", "infer", "compute_output"] * 2
    )
    log_lines = [line for line in traced_server.log().splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in log_lines]
    assert any("READY" in r["message"] and r["logger"].startswith("ferry") for r in records), log_lines[:5]
