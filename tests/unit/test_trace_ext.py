"""The trace extension on OpenTelemetry: real inferences through a loaded ONNX model, spans caught
by the SDK's in-memory exporter; sampling and settings as Triton defines them."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ferry.api.dataplane import DataPlane
from ferry.api.trace_ext import RequestTracing, file_exporter
from ferry.errors import InvalidArgument
from ferry.repository.manager import ControlMode, ModelManager
from ferry.types import InferenceRequest

MODEL_REPO = Path(__file__).resolve().parents[2] / "model_repo"


def memory_tracing() -> tuple[RequestTracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RequestTracing(provider=provider), exporter


def request(index: int) -> InferenceRequest:
    a = np.full((1, 16), index, dtype=np.int32)
    return InferenceRequest("simple", id=f"req-{index}", inputs={"INPUT0": a, "INPUT1": a})


def run_requests(tmp_path: Path, tracing: RequestTracing, count: int) -> None:
    """Load the bundled 'simple' model and send ``count`` inferences through the data plane."""
    shutil.copytree(MODEL_REPO / "simple", tmp_path / "simple")
    manager = ModelManager(tmp_path, ControlMode.EXPLICIT, startup_models=["simple"])
    plane = DataPlane(manager, tracing=tracing)

    async def go() -> None:
        await manager.start()
        try:
            for index in range(count):
                response = await plane.infer(request(index))
                assert response.outputs[0].data[0, 0] == 2 * index
        finally:
            await manager.stop()

    asyncio.run(go())


def test_a_traced_request_is_a_span_tree_with_each_stage(tmp_path: Path) -> None:
    tracing, exporter = memory_tracing()
    tracing.update({"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    run_requests(tmp_path, tracing, 1)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"InferRequest", "queue", "compute_input", "infer", "compute_output"}
    root = spans["InferRequest"]
    assert root.attributes["triton.model_name"] == "simple" and root.attributes["triton.request_id"] == "req-0"
    stages = [spans[name] for name in ("queue", "compute_input", "infer", "compute_output")]
    for stage in stages:
        assert stage.parent.span_id == root.context.span_id and stage.context.trace_id == root.context.trace_id
        assert root.start_time <= stage.start_time <= stage.end_time <= root.end_time
    for earlier, later in zip(stages, stages[1:], strict=False):
        assert earlier.end_time == later.start_time  # the stages tile the scheduler's timeline
    events = [event.name for event in root.events]
    assert events == [
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
    ]
    assert [e.timestamp for e in root.events] == sorted(e.timestamp for e in root.events)


def test_rate_count_and_per_model_settings_choose_what_is_traced(tmp_path: Path) -> None:
    tracing, exporter = memory_tracing()
    tracing.update({"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    tracing.update({"trace_rate": "3", "trace_count": "2"}, model="simple")
    run_requests(tmp_path, tracing, 9)  # requests 0, 3, 6 are sampled; the count stops after two
    roots = [s for s in exporter.get_finished_spans() if s.name == "InferRequest"]
    assert [s.attributes["triton.request_id"] for s in roots] == ["req-0", "req-3"]
    assert tracing.settings("simple")["trace_count"] == "0"
    assert tracing.settings()["trace_count"] == "-1"  # the server-wide count is untouched
    tracing.update({"trace_rate": None, "trace_count": None}, model="simple")  # back to the global values
    assert tracing.settings("simple") == tracing.settings()


def test_level_off_traces_nothing(tmp_path: Path) -> None:
    tracing, exporter = memory_tracing()
    assert tracing.settings()["trace_level"] == ["OFF"]
    run_requests(tmp_path, tracing, 2)
    assert exporter.get_finished_spans() == ()


def test_file_exporter_writes_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(file_exporter(path)))
    tracing = RequestTracing(provider=provider, trace_file=str(path))
    tracing.update({"trace_level": "TIMESTAMPS", "trace_rate": 1})
    run_requests(tmp_path / "repo", tracing, 1)
    tracing.shutdown()
    names = [json.loads(line)["name"] for line in path.read_text().splitlines()]
    assert sorted(names) == sorted(["InferRequest", "queue", "compute_input", "infer", "compute_output"])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trace_level": ["TENSORS"]}, "TENSORS (tensor contents in traces) is not supported"),
        ({"trace_level": ["LOUD"]}, "trace_level 'LOUD' is not one of"),
        ({"trace_rate": "0"}, "'trace_rate' must be >= 1"),
        ({"trace_count": "-2"}, "'trace_count' must be >= -1"),
        ({"trace_rate": "often"}, "'trace_rate' must be an integer"),
        ({"trace_file": "/tmp/elsewhere.json"}, "'trace_file' can not be updated through network protocol"),
        ({"log_frequency": "5"}, "'log_frequency' can not be updated through network protocol"),
        ({"trace_mode": "triton"}, "'trace_mode' can not be updated through network protocol"),
        ({"sampling": "1"}, "unknown trace setting 'sampling'"),
        ({"trace_rate": "2", "trace_level": ["TENSORS"]}, "TENSORS"),  # nothing applied when one is bad
    ],
)
def test_bad_settings_are_refused_and_change_nothing(changes: dict, message: str) -> None:
    tracing, _ = memory_tracing()
    before = tracing.settings()
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        tracing.update(changes)
    assert tracing.settings() == before
