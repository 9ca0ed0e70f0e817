"""An engine's working memory is counted before it is paid (issue 38, items 4 and 5).

ONNX Runtime holds 13-17 bytes a byte of input while it runs PP-OCR's detector (an 8-MP page:
+1.3 GB), memory no front door sees. The bundled ``text_detector`` says so with its
``working_memory_factor`` parameter, and the path counts that many bytes per input byte on the
request's ticket before the execution runs. Each test sends a request within every other limit
(body, ``max_variable_elements``, ``max_detector_pixels``) whose counted working memory passes a
small ``--max-engine-memory-bytes`` (the engines' own budget, apart from ``--max-inflight-bytes``):
refused with 413 naming the model, the parameter and the limit,
counted as an admission rejection, the detector never run; a smaller request still runs. One
process and two intake processes (a V2 infer is handed off to the model process, which counts on a
ticket of its own; ``/ocr`` is relayed there).
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.http as thttp
from PIL import Image

from tests import ocr_reference as ocr

from ..conftest import RunningServer, start_server
from ..server_metrics import metric, scrape

pytestmark = pytest.mark.timeout(180)

MIB = 2**20
#: Room for what ONNX Runtime holds running a 0.1-MP detector input, not a 1-MP one.
CAP = 128 * MIB
DETECTOR_OUTPUT = "sigmoid_0.tmp_0"


@pytest.fixture(scope="module", params=["one process", "intake processes"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("working_memory") / "models"
    source = ocr.ensure_models()
    for model in (*ocr.MODELS, "ocr"):
        shutil.copytree(source / model, repo / model)
    running = start_server(
        repo,
        repo.parent / "server.log",
        *("--max-engine-memory-bytes", str(CAP)),
        *("--intake-processes", "2" if request.param == "intake processes" else "1"),
    )
    yield running
    running.stop()


def _detector_infer(server: RunningServer, side: int) -> httpx.Response:
    """A V2 infer of a ``side`` x ``side`` page of zeros to text_detector, gzipped (a few kB)."""
    data = np.zeros((1, 3, side, side), dtype=np.float32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [1, 3, side, side],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)},
                }
            ],
            "outputs": [{"name": DETECTOR_OUTPUT, "parameters": {"binary_data": True}}],
        }
    ).encode()
    return httpx.post(
        f"http://{server.http_url}/v2/models/text_detector/infer",
        content=gzip.compress(header + data, compresslevel=1),
        headers={
            "Content-Type": "application/octet-stream",
            "Content-Encoding": "gzip",
            "Inference-Header-Content-Length": str(len(header)),
        },
        timeout=120,
    )


def _executions(server: RunningServer) -> int:
    client = thttp.InferenceServerClient(server.http_url)
    try:
        return int(client.get_inference_statistics("text_detector")["model_stats"][0]["execution_count"])
    finally:
        client.close()


def _rejected(server: RunningServer) -> float:
    return metric(scrape(server), "ferry_admission_rejected_total")


def _assert_refused_for_working_memory(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    message = response.json()["error"]
    assert "model 'text_detector' holds about" in message, message
    assert "parameters 'working_memory_factor'" in message and f"limit of {CAP}" in message, message
    assert "--max-engine-memory-bytes" in message, message


def test_a_detector_input_within_its_limits_is_refused_for_its_working_memory(server) -> None:
    # 3 x 1024 x 1024 (3 Mi elements, within text_detector's 4 Mi; 12.6 MB, within the cap): ONNX
    # Runtime would hold ~14 x 12.6 MB = 176 MB running it, past the 128 MiB cap
    executions, rejected = _executions(server), _rejected(server)
    _assert_refused_for_working_memory(_detector_infer(server, 1024))
    assert _executions(server) == executions  # refused before the detector ran
    assert _rejected(server) == rejected + 1
    response = _detector_infer(server, 320)  # ~17 MB of working memory: runs
    assert response.status_code == 200, response.text
    assert _executions(server) == executions + 1


def _png(page: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(page).save(out, format="PNG")
    return out.getvalue()


def test_an_ocr_pages_detector_step_is_refused_for_its_working_memory(server) -> None:
    # 384 x 191 enlarged to 1472 x 736 for the detector (within max_detector_pixels): ~180 MB of
    # working memory besides the page's own stages, past the cap
    executions = _executions(server)
    response = httpx.post(f"http://{server.http_url}/v2/models/ocr/ocr", content=ocr.photos()["page"], timeout=120)
    _assert_refused_for_working_memory(response)
    assert _executions(server) == executions
    # a blank 736 x 736 page: ~90 MB of working memory, read (no lines)
    blank = _png(np.full((736, 736, 3), 255, dtype=np.uint8))
    response = httpx.post(f"http://{server.http_url}/v2/models/ocr/ocr", content=blank, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["lines"] == []
    assert _executions(server) == executions + 1
