"""The README's worked example "Serving your own detector": a YOLOv8-shaped ONNX file as Ultralytics
exports it (built by tests/models.py, nothing downloaded) served with the README's config verbatim,
labelled from the class names in its metadata; and the advice when its dynamic size is left in."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from PIL import Image

from ferry_client import HttpClient

from ..conftest import ROOT, RunningServer, start_server
from ..models import write_yolov8_export

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NAMES = {0: "red", 1: "green", 2: "blue"}


def readme_config() -> str:
    """The config.pbtxt the README shows for my_detector (the block after its marker)."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- own_detector config:[^>]*-->\n```\n(.*?)```", readme, re.S)
    assert match, "README.md lost the own_detector config block"
    return match.group(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("own") / "models"
    write_yolov8_export(repo / "my_detector" / "1" / "model.onnx", NAMES)
    (repo / "my_detector" / "config.pbtxt").write_text(readme_config())
    write_yolov8_export(repo / "left_dynamic" / "1" / "model.onnx", NAMES)
    (repo / "left_dynamic" / "config.pbtxt").write_text(
        readme_config().replace("my_detector", "left_dynamic").replace("dims: [ 3, 640, 640 ]", "dims: [ 3, -1, -1 ]")
    )
    running = start_server(repo, repo.parent / "server.log")
    yield running
    running.stop()


def red_square_photo() -> bytes:
    """An 800x600 photo, black but for a red 40x40 square at (400, 300): letterboxed to 640 (gain 0.8,
    80 rows of padding above) the square covers exactly one 32-pixel cell of the model."""
    pixels = np.zeros((600, 800, 3), np.uint8)
    pixels[300:340, 400:440, 0] = 255
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_readme_config_serves_the_export_with_its_own_class_names(server: RunningServer) -> None:
    with HttpClient(server.http_url) as client:
        detections = client.detect("my_detector", red_square_photo())
    confident = [d for d in detections if d.score > 0.5]  # the grey letterbox padding scores 0.45 per cell
    assert len(confident) == 1, detections
    found = confident[0]
    assert found.label == "red" and found.class_id == 0 and found.score == pytest.approx(1.0)
    np.testing.assert_allclose(found.box, [400, 300, 440, 340], atol=0.5)


def test_intake_processes_label_with_the_names_the_model_process_read(tmp_path) -> None:
    """With intake processes the post-stage runs in the intake, from the labels the model process
    loaded (the hand-off's describe), so metadata names reach it too."""
    repo = tmp_path / "models"
    write_yolov8_export(repo / "my_detector" / "1" / "model.onnx", NAMES)
    (repo / "my_detector" / "config.pbtxt").write_text(readme_config())
    running = start_server(repo, tmp_path / "server.log", "--intake-processes", "2")
    try:
        with HttpClient(running.http_url) as client:
            found = [d for d in client.detect("my_detector", red_square_photo()) if d.score > 0.5]
        assert [(d.label, d.class_id) for d in found] == [("red", 0)]
    finally:
        running.stop()


def test_dynamic_height_and_width_are_refused_with_the_dims_to_declare(server: RunningServer) -> None:
    index = httpx.post(f"http://{server.http_url}/v2/repository/index", json={}).json()
    row = next(r for r in index if r["name"] == "left_dynamic")
    assert row["state"] == "UNAVAILABLE"
    assert "got dims [3, -1, -1]: declare the size the model was exported at" in row["reason"]
    assert "dims: [3, 640, 640] for an Ultralytics export" in row["reason"]
