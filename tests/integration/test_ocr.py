"""OCR served by the real server against rapidocr_onnxruntime 1.4.4's own answers
(``model_repo/ocr/reference.json``, made by ``model_repo/ocr/reference.py`` with the package):
the ``ocr`` model over ``/ocr``, REST and gRPC V2 infer, and the three composing models alone
over V2 infer. Same strings, boxes within 1 px, confidences within 1e-3, on every reference page.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from ferry.pipelines.text import ctc, db, reading, sizes, tensors
from tests import ocr_reference as ocr

from ..conftest import RunningServer, start_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SCORE_TOLERANCE = 1e-3
PIXEL_TOLERANCE = 1.0
#: Pages for the models-alone test: a scan, turned 90 and 180 degrees, a crop, a strip RapidOCR
#: pads, a rendered upside-down line.
ALONE_PAGES = (
    "page",
    "page_turned_90",
    "page_upside_down",
    "page_left_crop",
    "page_wide_strip",
    "rendered_upside_down",
)
#: Two pages of "page" give two recognition batches of 5 lines of one width.
GATED_BATCH = 10


@pytest.fixture(scope="module")
def ocr_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The OCR models, plus ``ocr_gated``: the same pipeline over a recogniser whose batcher
    holds lines until it has ``GATED_BATCH`` of them (so two concurrent pages must share one
    execution)."""
    source = ocr.ensure_models()
    repo = tmp_path_factory.mktemp("ocr") / "models"
    for model in (*ocr.MODELS, "ocr"):
        shutil.copytree(source / model, repo / model)
    # the reference's detector inputs (up to 3 x 736 x 7072) pass the bundled detector's bound on
    # tensors sent to it directly (``max_variable_elements``); the ocr model's own are not bound by it
    detector = repo / "text_detector" / "config.pbtxt"
    detector.write_text(detector.read_text().replace('string_value: "4194304"', 'string_value: "16777216"'))
    gated = repo / "text_recognizer_gated"
    shutil.copytree(source / "text_recognizer", gated)
    config = (gated / "config.pbtxt").read_text()
    config = config.replace('name: "text_recognizer"', 'name: "text_recognizer_gated"').replace(
        "dynamic_batching { }",
        f"dynamic_batching {{ preferred_batch_size: [ {GATED_BATCH} ] max_queue_delay_microseconds: 30000000 }}",
    )
    (gated / "config.pbtxt").write_text(config)
    shutil.copytree(source / "ocr", repo / "ocr_gated")
    pipeline = (repo / "ocr_gated" / "config.pbtxt").read_text()
    (repo / "ocr_gated" / "config.pbtxt").write_text(
        pipeline.replace('name: "ocr"', 'name: "ocr_gated"').replace(
            'string_value: "text_recognizer"', 'string_value: "text_recognizer_gated"'
        )
    )
    # the pipeline reading lines in rapidocr 3.10's order
    shutil.copytree(source / "ocr", repo / "ocr_lines")
    pipeline = (repo / "ocr_lines" / "config.pbtxt").read_text().replace('name: "ocr"', 'name: "ocr_lines"')
    (repo / "ocr_lines" / "config.pbtxt").write_text(
        pipeline.replace('string_value: "neighbour_swap"', 'string_value: "line_groups"')
    )
    # the pipeline cutting its crops with OpenCV 4.10's warp written in numpy
    shutil.copytree(source / "ocr", repo / "ocr_numpy_warp")
    pipeline = (repo / "ocr_numpy_warp" / "config.pbtxt").read_text().replace('name: "ocr"', 'name: "ocr_numpy_warp"')
    (repo / "ocr_numpy_warp" / "config.pbtxt").write_text(
        pipeline + 'parameters { key: "crop_warp" value { string_value: "opencv_4_10" } }\n'
    )
    # the reference's pages need ~1 GB for ONNX Runtime's detector run (736 x 7072: 62 MB x 14, its
    # working_memory_factor), past the default --max-engine-memory-bytes: this module checks what is read
    running = start_server(repo, repo.parent / "server.log", "--max-engine-memory-bytes", str(2 * 2**30))
    yield running
    running.stop()


def assert_lines_match(found: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [line["text"] for line in found] == [line["text"] for line in expected]
    for line, want in zip(found, expected, strict=True):
        assert np.abs(np.array(line["box"]) - np.array(want["box"])).max() <= PIXEL_TOLERANCE, (line, want)
        assert line["score"] == pytest.approx(want["score"], abs=SCORE_TOLERANCE)


def test_ocr_endpoint_reads_every_page_as_rapidocr(ocr_server: RunningServer) -> None:
    names = list(ocr.photos())
    files = [("images", (f"{name}.png", ocr.photos()[name], "image/png")) for name in names]
    response = httpx.post(f"http://{ocr_server.http_url}/v2/models/ocr/ocr", files=files, timeout=300)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == len(names) >= 12
    for name, result in zip(names, results, strict=True):
        assert_lines_match(result["lines"], ocr.reference()[name]["ocr"])
    assert sum(len(result["lines"]) for result in results) > 50


def test_line_groups_reading_order_reads_lines_as_rapidocr_3(ocr_server: RunningServer) -> None:
    """``reading_order: line_groups``: the lines in rapidocr 3.10's order (its detector sorts them),
    same strings, boxes and scores (model_repo/ocr/reference_lines.json); on the turned receipts
    1.4.4's order (the default) differs."""
    pages = {**{n: ocr.photos()[n] for n in ("page_left_crop", "rendered_lines")}, **ocr.tilted()}
    files = [("images", (f"{name}.png", data, "image/png")) for name, data in pages.items()]
    url = f"http://{ocr_server.http_url}/v2/models/{{}}/ocr"
    lines = httpx.post(url.format("ocr_lines"), files=files, timeout=300)
    assert lines.status_code == 200, lines.text
    for name, result in zip(pages, lines.json()["results"], strict=True):
        assert_lines_match(result["lines"], ocr.reference_lines()[name]["ocr"])
    swapped = httpx.post(url.format("ocr"), files=files[-3:-2], timeout=300).json()["results"][0]["lines"]
    texts = [line["text"] for line in ocr.reference_lines()["receipt_turned_2"]["ocr"]]
    assert sorted(line["text"] for line in swapped) == sorted(texts) != [line["text"] for line in swapped]


def test_numpy_crop_warp_reads_every_page_as_rapidocr(ocr_server: RunningServer) -> None:
    """``crop_warp: opencv_4_10``: crops cut by OpenCV 4.10's warp in numpy, whatever OpenCV is
    installed, give RapidOCR 1.4.4's answers (made under 4.10) on the cheapest pages."""
    names = ["page_left_crop", "page_wide_strip", "rendered_lines"]
    files = [("images", (f"{name}.png", ocr.photos()[name], "image/png")) for name in names]
    response = httpx.post(f"http://{ocr_server.http_url}/v2/models/ocr_numpy_warp/ocr", files=files, timeout=300)
    assert response.status_code == 200, response.text
    for name, result in zip(names, response.json()["results"], strict=True):
        assert_lines_match(result["lines"], ocr.reference()[name]["ocr"])


def _v2_lines(boxes: np.ndarray, text: np.ndarray, scores: np.ndarray) -> list[dict[str, Any]]:
    return [
        {"box": box.tolist(), "text": line.decode("utf-8"), "score": float(score)}
        for box, line, score in zip(boxes, text, scores, strict=True)
    ]


def test_v2_infer_over_rest_and_grpc(ocr_server: RunningServer) -> None:
    name = "page_left_crop"  # the cheapest page for the detector (1216x736)
    page = np.array([ocr.photos()[name]], dtype=object)
    expected = ocr.reference()[name]["ocr"]
    rest = thttp.InferenceServerClient(ocr_server.http_url, network_timeout=120)
    tensor = thttp.InferInput("IMAGE", [1], "BYTES")
    tensor.set_data_from_numpy(page, binary_data=True)
    found = rest.infer("ocr", [tensor])
    assert_lines_match(_v2_lines(found.as_numpy("boxes"), found.as_numpy("text"), found.as_numpy("scores")), expected)
    grpc = tgrpc.InferenceServerClient(ocr_server.grpc_url)
    tensor = tgrpc.InferInput("IMAGE", [1], "BYTES")
    tensor.set_data_from_numpy(page)
    found = grpc.infer("ocr", [tensor])
    assert found.as_numpy("boxes").shape == (len(expected), 4, 2)
    assert_lines_match(_v2_lines(found.as_numpy("boxes"), found.as_numpy("text"), found.as_numpy("scores")), expected)
    rest.close()
    grpc.close()


def test_a_traced_page_has_a_span_per_model_step(tmp_path: Path) -> None:
    """Each of the OCR model's steps is a request of its composing model through the request path,
    so a traced page shows the detector's, the angle classifier's and the recogniser's requests
    (one per recognition batch) beside the OCR model's own."""
    source = ocr.ensure_models()
    repo = tmp_path / "models"
    for model in (*ocr.MODELS, "ocr"):
        shutil.copytree(source / model, repo / model)
    trace_file = tmp_path / "trace.jsonl"
    server = start_server(repo, tmp_path / "server.log", "--trace-file", str(trace_file))
    name = "page_left_crop"  # the cheapest page for the detector
    try:
        rest = thttp.InferenceServerClient(server.http_url, network_timeout=120)
        rest.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
        tensor = thttp.InferInput("IMAGE", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([ocr.photos()[name]], dtype=object), binary_data=True)
        found = rest.infer("ocr", [tensor])
        lines = _v2_lines(found.as_numpy("boxes"), found.as_numpy("text"), found.as_numpy("scores"))
        assert_lines_match(lines, ocr.reference()[name]["ocr"])
        rest.close()
    finally:
        server.stop()  # flushes the batched spans
    spans = [json.loads(line) for line in trace_file.read_text().splitlines()]
    models = [s["attributes"]["triton.model_name"] for s in spans if s["name"] == "InferRequest"]
    assert {model: models.count(model) for model in ("ocr", "text_detector", "text_angle")} == {
        "ocr": 1,
        "text_detector": 1,
        "text_angle": 1,
    }
    assert models.count("text_recognizer") >= 1
    assert set(models) == {"ocr", *ocr.MODELS}


def _infer(client: thttp.InferenceServerClient, model: str, batch: np.ndarray) -> np.ndarray:
    tensor = thttp.InferInput("x", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch, binary_data=True)
    result = client.infer(model, [tensor])
    return result.as_numpy(result.get_response()["outputs"][0]["name"])


def test_the_three_models_alone_match_their_reference_classes(ocr_server: RunningServer) -> None:
    """TextDetector's boxes from the served detector's map; TextClassifier's and
    TextRecognizer's answers from the served models on the crops RapidOCR cut (on the pages
    that cost the detector least; the /ocr test above covers every page)."""
    client = thttp.InferenceServerClient(ocr_server.http_url, network_timeout=300)
    characters = ctc.ctc_characters(ocr.characters())
    crops_seen = 0
    for name in ALONE_PAGES:
        encoded = ocr.photos()[name]
        expected = ocr.reference()[name]
        image = ocr.bgr(encoded)
        probabilities = _infer(client, "text_detector", tensors.detector_tensor(image, 736, sizes.LimitType.MIN)[None])
        quads, _ = db.text_quads(probabilities[0, 0], image.shape[1], image.shape[0], db.DbOptions())
        np.testing.assert_array_equal(quads, np.array(expected["detector"], dtype=np.float32).reshape(-1, 4, 2))

        page = reading.prepare_page(image, reading.PageOptions())
        if page.pixels.shape != image.shape:  # RapidOCR padded or resized the page: detect on that
            page_map = _infer(
                client, "text_detector", tensors.detector_tensor(page.pixels, 736, sizes.LimitType.MIN)[None]
            )
            height, width = page.pixels.shape[:2]
            quads, _ = db.text_quads(page_map[0, 0], width, height, db.DbOptions())
        crops = [reading.crop_quad(page.pixels, quads[i]) for i in reading.reading_order(quads)]
        assert [ocr.reference_module().crop_digest(c)["sha256"] for c in crops] == [
            c["sha256"] for c in expected["crops"]
        ]
        if not crops:
            continue
        angles = _infer(client, "text_angle", np.stack([tensors.text_line_tensor(c, 48, 192) for c in crops]))
        widths = [sizes.recognition_width([c.shape[1] / c.shape[0]], 48, 320) for c in crops]
        recognised: dict[int, tuple[str, float]] = {}
        for width in set(widths):  # each line at its own width, lines of one width in one request
            members = [i for i, w in enumerate(widths) if w == width]
            lines = _infer(
                client, "text_recognizer", np.stack([tensors.text_line_tensor(crops[i], 48, width) for i in members])
            )
            recognised.update(zip(members, ctc.ctc_greedy(lines, characters), strict=True))
        for index, (row, want) in enumerate(zip(angles, expected["crops"], strict=True)):
            assert ["0", "180"][int(row.argmax())] == want["angle"]["label"]
            assert float(row.max()) == pytest.approx(want["angle"]["score"], abs=SCORE_TOLERANCE)
            text, score = recognised[index]
            assert text == want["recognised"]["text"]
            assert score == pytest.approx(want["recognised"]["score"], abs=SCORE_TOLERANCE)
            crops_seen += 1
    assert crops_seen == 26
    client.close()


def test_recognition_lines_of_concurrent_pages_share_executions(ocr_server: RunningServer) -> None:
    """Two pages at once: the gated recogniser runs only once it holds both pages' lines."""
    page = ocr.photos()["page"]
    assert len(ocr.reference()["page"]["crops"]) * 2 == GATED_BATCH

    def read(_: int) -> list[dict[str, Any]]:
        response = httpx.post(
            f"http://{ocr_server.http_url}/v2/models/ocr_gated/ocr",
            content=page,
            headers={"content-type": "image/png"},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        return response.json()["results"][0]["lines"]

    with ThreadPoolExecutor(2) as pool:
        for lines in pool.map(read, range(2)):
            assert_lines_match(lines, ocr.reference()["page"]["ocr"])
    client = thttp.InferenceServerClient(ocr_server.http_url)
    stats = client.get_inference_statistics("text_recognizer_gated")["model_stats"][0]
    assert stats["execution_count"] == 1
    assert stats["inference_count"] == GATED_BATCH
    assert client.get_inference_statistics("ocr_gated")["model_stats"][0]["inference_count"] == 2
    client.close()


def test_bad_pages_get_precise_errors(ocr_server: RunningServer) -> None:
    url = f"http://{ocr_server.http_url}/v2/models"
    response = httpx.post(f"{url}/ocr/ocr", content=b"not an image", timeout=30)
    assert response.status_code == 400 and "not a recognised image format" in response.json()["error"]
    response = httpx.post(f"{url}/ocr/ocr?top_k=3", content=ocr.photos()["page"], timeout=30)
    assert response.status_code == 400 and "unknown query parameter 'top_k' for /ocr" in response.json()["error"]
    response = httpx.post(f"{url}/ocr/detect", content=ocr.photos()["page"], timeout=30)
    assert response.status_code == 400 and "use /ocr" in response.json()["error"]
    response = httpx.post(f"{url}/text_angle/ocr", content=ocr.photos()["page"], timeout=30)
    assert response.status_code == 400 and "not an OCR model" in response.json()["error"]
    grpc = tgrpc.InferenceServerClient(ocr_server.grpc_url)
    tensor = tgrpc.InferInput("IMAGE", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"\x89PNG\r\n\x1a\ntruncated"], dtype=object))
    with pytest.raises(Exception, match="INVALID_ARGUMENT|truncated or corrupt"):
        grpc.infer("ocr", [tensor])
    grpc.close()
    # The server still reads pages.
    response = httpx.post(f"{url}/ocr/ocr", content=ocr.photos()["rendered_lines"], timeout=60)
    assert [line["text"] for line in response.json()["results"][0]["lines"]] == [
        line["text"] for line in ocr.reference()["rendered_lines"]["ocr"]
    ]
