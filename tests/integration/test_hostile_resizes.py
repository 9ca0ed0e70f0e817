"""Images whose cost is in what they expand to, not in what is sent (issue 38, items 4 and 5).

A 93-byte 1 x 4000 PNG resized so its shorter side is 256 is a 786 MB image; a thin page under the
OCR detector's size rule is gigabytes; a WebP's decoder holds ~16 bytes a pixel. Each test sends
the small request and checks what the server does before paying: a crop computed alone (answered),
a resize past the pixel limit refused with 400 naming it, a decoder's real peak counted in admission
(413 naming ``--max-inflight-bytes``, nothing decoded), an OCR page refused from its header when its
detector input passes ``max_detector_pixels``, and a page with more text boxes than
``max_text_boxes`` refused after detection. One process and two intake processes (``/classify``
decodes in the intake; ``/ocr`` is relayed to the model process).
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
from PIL import Image

from tests import ocr_reference as ocr

from ..conftest import MODEL_REPO, RunningServer, start_server
from ..server_metrics import metric, scrape

pytestmark = pytest.mark.timeout(180)

MIB = 2**20
CAP = 64 * MIB


@pytest.fixture(scope="module", params=["one process", "intake processes"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_resizes") / "models"
    shutil.copytree(MODEL_REPO / "document_orientation", repo / "document_orientation")
    source = ocr.ensure_models()
    for model in (*ocr.MODELS, "ocr"):
        shutil.copytree(source / model, repo / model)
    for model in ("text_detector", "text_recognizer"):  # their engines' holds: test_hostile_working_memory.py
        config = repo / model / "config.pbtxt"
        lines = config.read_text().splitlines(keepends=True)
        config.write_text("".join(line for line in lines if '"working_memory_factor"' not in line))
    shutil.copytree(source / "ocr", repo / "ocr_few_boxes")
    config = (repo / "ocr_few_boxes" / "config.pbtxt").read_text().replace('name: "ocr"', 'name: "ocr_few_boxes"')
    config += 'parameters { key: "max_text_boxes" value { string_value: "2" } }\n'
    (repo / "ocr_few_boxes" / "config.pbtxt").write_text(config)
    running = start_server(
        repo,
        repo.parent / "server.log",
        *("--max-inflight-bytes", str(CAP)),
        *("--intake-processes", "2" if request.param == "intake processes" else "1"),
    )
    yield running
    running.stop()


def _png(width: int, height: int, value: int = 255) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (value, value, value)).save(out, format="PNG")
    return out.getvalue()


def _post(server: RunningServer, path: str, body: bytes) -> httpx.Response:
    return httpx.post(f"http://{server.http_url}{path}", content=body, timeout=120)


def _decoded(server: RunningServer) -> float:
    return metric(scrape(server), "ferry_image_decoded_total")


@pytest.mark.parametrize("size", [(1, 30000), (30000, 1)])
def test_a_thin_image_is_classified_from_its_crop_alone(server, size) -> None:
    # shorter side to 256: the whole resize would be 256 x 7,680,000 pixels (5.9 GB); its crop is 224 x 224
    thin = _png(*size, value=90)
    assert len(thin) < 2000
    response = _post(server, "/v2/models/document_orientation/classify", thin)
    assert response.status_code == 200, response.text
    [found] = response.json()["results"]
    assert len(found["classes"]) == 4


def test_a_webp_is_counted_with_its_decoders_buffers(server) -> None:
    # 3000 x 2000 lossless WebP of one colour: a few hundred bytes; libwebp and Pillow's plugin hold
    # ~16 bytes a pixel while it decodes (96 MB here), past the 64 MiB cap
    out = io.BytesIO()
    Image.new("RGB", (3000, 2000), (10, 200, 30)).save(out, format="WEBP", lossless=True)
    decoded = _decoded(server)
    response = _post(server, "/v2/models/document_orientation/classify", out.getvalue())
    assert response.status_code == 413, response.text
    assert "--max-inflight-bytes" in response.text, response.text
    assert _decoded(server) == decoded  # refused from the header: nothing was decoded
    small = io.BytesIO()
    Image.new("RGB", (1000, 800), (10, 200, 30)).save(small, format="WEBP", lossless=True)
    response = _post(server, "/v2/models/document_orientation/classify", small.getvalue())
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("size", [(8, 2000), (1, 2000), (2000, 1)])
def test_a_thin_page_is_refused_from_its_header(server, size) -> None:
    # 8 x 2000: enlarged to a 32-wide page, then to 736 x 172,224 for the detector (1.5 GB as FP32)
    response = _post(server, "/v2/models/ocr/ocr", _png(*size))
    assert response.status_code == 400, response.text
    assert "max_detector_pixels" in response.text and "detector input" in response.text, response.text


def test_a_page_with_more_text_boxes_than_the_limit_is_refused(server) -> None:
    page = ocr.photos()["page"]
    response = _post(server, "/v2/models/ocr/ocr", page)
    assert response.status_code == 200, response.text
    assert len(response.json()["results"][0]["lines"]) > 2  # the page has more lines than ocr_few_boxes takes
    response = _post(server, "/v2/models/ocr_few_boxes/ocr", page)
    assert response.status_code == 400, response.text
    assert "max_text_boxes" in response.text and "more than the limit of 2" in response.text, response.text


def test_a_wide_page_is_read_past_the_detectors_own_tensor_bound(server) -> None:
    """The OCR model's steps are requests through the path, but the tensors it makes itself are
    bounded by its own limits (max_detector_pixels), not by the step model's bound for clients'
    tensors: a 736 x 2624 detector input (5.8 Mi elements, over text_detector's 4 Mi) is read."""
    lines = ["Ferry serves OCR models", "Invoice 2024-117: 42.50 EUR"]
    page = ocr.reference_module().rendered(lines, 28, ((255, 255, 255), (20, 20, 20)))
    out = io.BytesIO()
    Image.fromarray(page).save(out, format="PNG")
    response = _post(server, "/v2/models/ocr/ocr", out.getvalue())
    assert response.status_code == 200, response.text
    assert len(response.json()["results"][0]["lines"]) == 2


OUTPUTS = {"text_detector": "sigmoid_0.tmp_0", "text_recognizer": "softmax_11.tmp_0"}


def _gzip_infer(model: str, shape: list[int]) -> tuple[bytes, dict[str, str]]:
    """A V2 infer of zeros of ``shape`` (FP32, binary extension), gzipped: a few kB on the wire."""
    data = np.zeros(shape, dtype=np.float32).tobytes()
    output = OUTPUTS[model]
    header = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": shape, "datatype": "FP32", "parameters": {"binary_data_size": len(data)}}
            ],
            "outputs": [{"name": output, "parameters": {"binary_data": True}}],  # a binary answer fits the cap
        }
    ).encode()
    return gzip.compress(header + data, compresslevel=1), {
        "Content-Type": "application/octet-stream",
        "Content-Encoding": "gzip",
        "Inference-Header-Content-Length": str(len(header)),
    }


@pytest.mark.parametrize(
    ("model", "shape", "limit"),
    [("text_detector", [1, 3, 1216, 1216], 4194304), ("text_recognizer", [1, 3, 48, 5000], 589824)],
)
def test_a_variable_size_input_past_its_models_limit_is_refused_before_it_runs(server, model, shape, limit) -> None:
    body, headers = _gzip_infer(model, shape)
    assert len(body) < 100_000
    response = httpx.post(
        f"http://{server.http_url}/v2/models/{model}/infer", content=body, headers=headers, timeout=60
    )
    assert response.status_code == 400, response.text
    assert f"more than the limit of {limit}" in response.text and "max_variable_elements" in response.text
    smaller = [*shape[:-1], 320]  # a line or a strip within the limit runs
    body, headers = _gzip_infer(model, smaller)
    response = httpx.post(
        f"http://{server.http_url}/v2/models/{model}/infer", content=body, headers=headers, timeout=60
    )
    assert response.status_code == 200, response.text
