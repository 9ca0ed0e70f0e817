"""A request the path will refuse is refused before any of its images is decoded (issue 40), in one
process and with intake processes (whose front half decodes too).

V2 infer with encoded images for ``digits`` and a bad ``priority``, an unknown requested output or
an unknown input decoded every image first and was refused only when the execution was validated.
Each test sends valid PNGs, so a decode would happen, and reads ``ferry_image_decoded_total``
(the image pools of every process, counted as each slice is decoded) before and after: a refused
request decodes nothing; the same images without the fault are decoded, so the count can move.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from ..conftest import MODEL_REPO, RunningServer, start_server
from ..server_metrics import metric, scrape

pytestmark = pytest.mark.timeout(120)

IMAGES = 20
DECODED = "ferry_image_decoded_total"


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("validation_order") / "models"
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    extra = ["--intake-processes", "2"] if request.param == "2 intake processes" else []
    running = start_server(repo, repo.parent / "server.log", *extra)
    yield running
    running.stop()


def _pngs() -> list[bytes]:
    files = []
    for shade in range(IMAGES):
        buffer = io.BytesIO()
        Image.new("L", (28, 28), shade * 10).save(buffer, "PNG")
        files.append(buffer.getvalue())
    return files


def _infer(server: RunningServer, **fault: Any) -> httpx.Response:
    """V2 infer of ``IMAGES`` encoded PNGs (binary tensor extension) with ``fault`` applied:
    ``parameters``, ``outputs`` or ``extra_input`` (a name the model does not take)."""
    files = _pngs()
    data = b"".join(len(f).to_bytes(4, "little") + f for f in files)
    inputs: list[dict[str, Any]] = [
        {"name": "input", "datatype": "BYTES", "shape": [IMAGES], "parameters": {"binary_data_size": len(data)}}
    ]
    body = data
    if "extra_input" in fault:
        extra = np.zeros((IMAGES, 1), np.float32).tobytes()
        inputs.append(
            {
                "name": fault["extra_input"],
                "datatype": "FP32",
                "shape": [IMAGES, 1],
                "parameters": {"binary_data_size": len(extra)},
            }
        )
        body += extra
    header: dict[str, Any] = {"inputs": inputs, "parameters": fault.get("parameters", {})}
    if "outputs" in fault:
        header["outputs"] = [{"name": name} for name in fault["outputs"]]
    encoded = json.dumps(header).encode()
    return httpx.post(
        f"http://{server.http_url}/v2/models/digits/infer",
        content=encoded + body,
        headers={"Inference-Header-Content-Length": str(len(encoded)), "Content-Type": "application/octet-stream"},
        timeout=60,
    )


def _decoded(server: RunningServer) -> float:
    return metric(scrape(server), DECODED)


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ({"parameters": {"priority": -1}}, "request parameter 'priority' must be an integer"),
        ({"parameters": {"timeout": "soon"}}, "request parameter 'timeout' must be an integer"),
        ({"outputs": ["probabilities"]}, "unexpected inference output 'probabilities'"),
        ({"extra_input": "mask"}, "unexpected inference input 'mask'"),
    ],
)
def test_a_refused_request_decodes_no_image(server: RunningServer, fault: dict[str, Any], message: str) -> None:
    before = _decoded(server)
    refused = _infer(server, **fault)
    assert refused.status_code == 400, refused.text
    assert message in refused.json()["error"], refused.text
    assert _decoded(server) == before, "images were decoded for a request refused as invalid"
    served = _infer(server)
    assert served.status_code == 200, served.text
    assert _decoded(server) == before + IMAGES
