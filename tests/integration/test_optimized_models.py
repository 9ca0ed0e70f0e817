"""An INT8 digits model written by `ferry optimize` (run as a command) served next to the FP32 one
by a real server: both answer /classify on the held-out PNGs, and INT8 keeps the accuracy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits

from ..conftest import MODEL_REPO, RunningServer, start_server


@pytest.fixture(scope="module")
def optimized_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningServer, list[bytes], np.ndarray]]:
    root = tmp_path_factory.mktemp("optimized")
    repo = root / "models"
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    digits = load_digits()
    test_indices = np.load(MODEL_REPO / "digits" / "test_split.npz")["test_indices"]
    held_out = set(test_indices.tolist())
    (root / "calib").mkdir()
    (root / "test").mkdir()
    for index, pixels in enumerate(digits.images):
        image = Image.fromarray(np.round(pixels * 255 / 16).astype(np.uint8), mode="L")
        image.save(root / ("test" if index in held_out else "calib") / f"{index:04d}.png")
    command = [
        sys.executable,
        "-m",
        "ferry",
        "optimize",
        str(repo / "digits"),
        "--precision",
        "int8",
        "--calibration-images",
        str(root / "calib"),
        "--eval-images",
        str(root / "test"),
        "--quiet",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "top-1 agreement with FP32" in done.stdout
    running = start_server(repo, root / "server.log")
    files = [(root / "test" / f"{index:04d}.png").read_bytes() for index in test_indices]
    yield running, files, digits.target[test_indices]
    running.stop()


def _accuracy(client: httpx.Client, model: str, files: list[bytes], labels: np.ndarray) -> float:
    predicted = []
    for start in range(0, len(files), 60):
        chunk = files[start : start + 60]
        response = client.post(
            f"/v2/models/{model}/classify",
            files=[("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(chunk)],
        )
        assert response.status_code == 200, response.text
        predicted.extend(int(r["classes"][0]["label"]) for r in response.json()["results"])
    return float(np.mean(np.array(predicted) == labels))


def test_int8_digits_served_beside_fp32_keeps_accuracy(optimized_server) -> None:
    server, files, labels = optimized_server
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        index = client.post("/v2/repository/index").json()
        assert {(m["name"], m["state"]) for m in index} == {("digits", "READY"), ("digits_int8", "READY")}
        fp32 = _accuracy(client, "digits", files, labels)
        int8 = _accuracy(client, "digits_int8", files, labels)
        config = client.get("/v2/models/digits_int8/config").json()
    print(f"\nheld-out digits through the server: FP32 {fp32:.4f}, INT8 {int8:.4f} ({len(files)} images)")
    assert fp32 >= 0.97
    assert int8 >= fp32 - 0.01
    assert config["platform"] == "onnxruntime_onnx" and config["max_batch_size"] == 64
