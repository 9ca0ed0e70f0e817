"""/classify and /detect through the one request path: what V2 infer has (validation, the timeout
and priority parameters, tracing, statistics), a Python model that takes encoded images, and
detection post-processing in the worker pool rather than on the event loop."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

from ferry.api.dataplane import DataPlane
from ferry.api.http import create_http_app
from ferry.backends.python_backend.host import HOST
from ferry.errors import InvalidArgument, Unavailable
from ferry.pipelines.runtime import ImagePipeline
from ferry.repository.manager import ModelManager
from ferry.scheduling import ModelScheduler, RequestBatchScheduler, Scheduler
from ferry.types import ControlMode

from .test_trace_ext import memory_tracing

HERE = Path(__file__).resolve().parent
MODEL_REPO = HERE.parents[1] / "model_repo"


def png(colour: tuple[int, int, int], size: tuple[int, int] = (32, 24)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def python_models_allowed() -> Iterator[None]:
    allowed = HOST.allowed
    HOST.allowed = True
    yield
    HOST.allowed = allowed


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The Python image model (its gate in tmp_path/gate) and the bundled digit detector."""
    root = tmp_path / "models"
    shutil.copytree(HERE / "image_models" / "image_means", root / "image_means")
    shutil.copytree(MODEL_REPO / "digit_detector", root / "digit_detector")
    gate = tmp_path / "gate"
    gate.mkdir()
    config = root / "image_means" / "config.pbtxt"
    parameter = f'parameters {{ key: "GATE_DIR" value {{ string_value: "{gate}" }} }}\n'
    config.write_text(config.read_text() + parameter)
    return root


@pytest_asyncio.fixture
async def plane(repo: Path, python_models_allowed: None) -> AsyncIterator[DataPlane]:
    manager = ModelManager(repo, ControlMode.EXPLICIT, startup_models=["image_means", "digit_detector"])
    await manager.start()
    try:
        yield DataPlane(manager)
    finally:
        await manager.stop()


async def wait_for(path: Path) -> None:
    for _ in range(2000):
        if path.exists():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.asyncio
async def test_classify_runs_a_python_model_that_takes_encoded_images(plane: DataPlane) -> None:
    model, results = await plane.serve_images("image_means", "", [png((250, 10, 5)), png((0, 0, 255))], "classify", {})
    assert model.name == "image_means"
    assert [classes[0]["label"] for classes in results] == ["red", "blue"]
    assert results[1][0]["score"] == pytest.approx(1.0)
    assert [c["index"] for c in results[0]] == [0, 1, 2]  # top_k 3 from the config, best first


@pytest.mark.asyncio
async def test_classify_splits_more_images_than_max_batch_size_on_a_python_model(plane: DataPlane) -> None:
    images = [png((0, 255, 0))] * 11  # max_batch_size 8: two executions
    _, results = await plane.serve_images("image_means", "", images, "classify", {"top_k": 1})
    assert [classes[0]["label"] for classes in results] == ["green"] * 11


@pytest.mark.asyncio
async def test_classify_honours_the_timeout_parameter(plane: DataPlane, tmp_path: Path) -> None:
    """The instance is held busy, so a second request waits in the queue past its 1 ms timeout."""
    gate = tmp_path / "gate"
    (gate / "hold").write_text("1")
    first = asyncio.create_task(plane.serve_images("image_means", "", [png((255, 0, 0))], "classify", {}))
    await wait_for(gate / "entered")
    with pytest.raises(Unavailable, match="timed out"):
        await plane.serve_images("image_means", "", [png((255, 0, 0))], "classify", {}, {"timeout": 1000})
    (gate / "release").write_text("1")
    _, results = await first
    assert results[0][0]["label"] == "red"
    stats = plane.statistics("image_means")[0]
    assert stats["inference_stats"]["fail"]["count"] == 1


@pytest.mark.asyncio
async def test_classify_validates_the_priority_parameter(plane: DataPlane) -> None:
    with pytest.raises(InvalidArgument, match="'priority' must be an integer between 0 and"):
        await plane.serve_images("image_means", "", [png((255, 0, 0))], "classify", {}, {"priority": -1})
    assert plane.statistics("image_means")[0]["inference_stats"]["fail"]["count"] == 1


@pytest.mark.asyncio
async def test_classify_over_http_takes_timeout_and_priority_as_query_parameters(plane: DataPlane) -> None:
    transport = httpx.ASGITransport(app=create_http_app(plane))
    async with httpx.AsyncClient(transport=transport, base_url="http://ferry") as client:
        url = "/v2/models/image_means/classify"
        ok = await client.post(url, params={"priority": 0, "timeout": 5_000_000}, content=png((0, 0, 200)))
        assert ok.status_code == 200 and ok.json()["results"][0]["classes"][0]["label"] == "blue"
        bad = await client.post(url, params={"priority": -1}, content=png((0, 0, 200)))
        assert bad.status_code == 400 and "'priority'" in bad.json()["error"]


@pytest.mark.asyncio
async def test_detect_appears_in_traces(repo: Path, python_models_allowed: None) -> None:
    tracing, exporter = memory_tracing()
    tracing.update({"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    manager = ModelManager(repo, ControlMode.EXPLICIT, startup_models=["digit_detector"])
    await manager.start()
    try:
        plane = DataPlane(manager, tracing=tracing)
        await plane.serve_images("digit_detector", "", [png((255, 255, 255), (96, 64))], "detect", {})
    finally:
        await manager.stop()
    roots = [span for span in exporter.get_finished_spans() if span.name == "InferRequest"]
    assert [span.attributes["triton.model_name"] for span in roots] == ["digit_detector"]


@pytest.mark.asyncio
async def test_detection_post_processing_runs_in_the_worker_pool(
    plane: DataPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoding and NMS run in a pool thread, once per execution for its whole batch."""
    calls: list[tuple[str, int]] = []
    detect = ImagePipeline.detect

    def recording(self: ImagePipeline, outputs: dict[str, np.ndarray], transforms: list, *args: object) -> list:
        calls.append((threading.current_thread().name, len(transforms)))
        return detect(self, outputs, transforms, *args)

    monkeypatch.setattr(ImagePipeline, "detect", recording)
    images = [png((255, 255, 255), (96, 64))] * 3
    _, results = await plane.serve_images("digit_detector", "", images, "detect", {"score_threshold": 0.01})
    assert len(results) == 3
    loop_thread = threading.current_thread().name
    assert len(calls) == 1 and calls[0][1] == 3
    assert calls[0][0] != loop_thread and calls[0][0].startswith("ferry-image")


@pytest.mark.asyncio
async def test_detect_refuses_bad_thresholds_before_decoding(plane: DataPlane) -> None:
    before = plane.image_work.decoded
    with pytest.raises(InvalidArgument, match="iou_threshold"):
        await plane.serve_images("digit_detector", "", [png((0, 0, 0))], "detect", {"iou_threshold": 2.0})
    assert plane.image_work.decoded == before


@pytest.mark.asyncio
async def test_every_version_holds_the_one_scheduler_interface(plane: DataPlane) -> None:
    """The dynamic batcher for an ONNX model, the Python-model runner for a Python model: both the
    declared ``ModelScheduler``; a READY version cannot be changed afterwards."""
    onnx_model, python_model = plane.model("digit_detector"), plane.model("image_means")
    assert type(onnx_model.scheduler) is Scheduler
    assert type(python_model.scheduler) is RequestBatchScheduler
    assert all(isinstance(m.scheduler, ModelScheduler) for m in (onnx_model, python_model))
    with pytest.raises(dataclasses.FrozenInstanceError):
        python_model.scheduler = onnx_model.scheduler  # type: ignore[misc]


@pytest.mark.asyncio
async def test_ocr_pages_take_the_request_path(tmp_path: Path) -> None:
    """/ocr: each page is traced, and priority is checked and counted, like V2 infer's requests."""
    from tests import ocr_reference

    source = ocr_reference.ensure_models()
    root = tmp_path / "models"
    for name in (*ocr_reference.MODELS, "ocr"):
        shutil.copytree(source / name, root / name)
    tracing, exporter = memory_tracing()
    tracing.update({"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    manager = ModelManager(root, ControlMode.EXPLICIT, startup_models=["ocr"])
    await manager.start()
    try:
        plane = DataPlane(manager, tracing=tracing)
        blank = png((255, 255, 255), (64, 48))
        served, results = await plane.serve_images("ocr", "", [blank, blank], "ocr", {}, {"priority": 1})
        assert served.name == "ocr" and results == [[], []]
        with pytest.raises(InvalidArgument, match="'priority' must be an integer between 0 and"):
            await plane.serve_images("ocr", "", [blank], "ocr", {}, {"priority": -1})
        assert plane.statistics("ocr")[0]["inference_stats"]["fail"]["count"] == 1
    finally:
        await manager.stop()
    roots = [span for span in exporter.get_finished_spans() if span.name == "InferRequest"]
    # each page is traced, and so is each of its steps (a blank page: only the detector runs)
    assert sorted(span.attributes["triton.model_name"] for span in roots) == ["ocr", "ocr", *["text_detector"] * 2]
