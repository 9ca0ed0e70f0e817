"""The three bundled OCR models served alone through the ordinary image pipeline (configs in
``tests/ocr_stages/``: ``resize: LIMIT_SIDE`` + ``detection { format: DBNET }``, ``resize:
TEXT_LINE`` + classification, ``resize: TEXT_LINE`` + ``text_recognition``), by a real server,
against rapidocr_onnxruntime 1.4.4's ``TextDetector``, ``TextClassifier`` and ``TextRecognizer``
answers in ``model_repo/ocr/reference.json``: same quadrilaterals (1 px), labels and strings,
scores within 1e-3. The crops come from the served detector's own quadrilaterals, and must be the
crops RapidOCR cut (same SHA-256), so the detector is checked on the padded pages too.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from PIL import Image

from ferry.pipelines.text import reading, sizes
from tests import ocr_reference as ocr

from ..conftest import RunningServer, start_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CONFIGS = Path(__file__).resolve().parents[1] / "ocr_stages"
MODELS = {
    "text_detector_image": "text_detector",
    "text_angle_image": "text_angle",
    "text_recognizer_image": "text_recognizer",
}
SCORE_TOLERANCE = 1e-3
PIXEL_TOLERANCE = 1.0
#: The pages that cost the detector least (as tests/integration/test_ocr.py's models-alone test).
PAGES = ("page", "page_turned_90", "page_upside_down", "page_left_crop", "page_wide_strip", "rendered_upside_down")


def _place(source: Path, target: Path) -> None:
    """The bundled file in the test repository: a hard link (no copy of 16 MB) or, across file
    systems, a copy (the server refuses symlinks that leave the model's folder)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    bundled = ocr.ensure_models()
    repo = tmp_path_factory.mktemp("ocr_stages") / "models"
    for name, source in MODELS.items():
        _place(bundled / source / "1" / "model.onnx", repo / name / "1" / "model.onnx")
        for extra in ("labels.txt", "characters.txt"):
            if (bundled / source / extra).is_file():
                _place(bundled / source / extra, repo / name / extra)
        shutil.copy(CONFIGS / f"{name}.pbtxt", repo / name / "config.pbtxt")
    # the recogniser with pad_to_batch: lines of different widths share one execution
    padded = repo / "text_recognizer_padded"
    for item in ("1/model.onnx", "characters.txt"):
        _place(repo / "text_recognizer_image" / item, padded / item)
    config = (CONFIGS / "text_recognizer_image.pbtxt").read_text()
    config = config.replace('name: "text_recognizer_image"', 'name: "text_recognizer_padded"')
    (padded / "config.pbtxt").write_text(
        config.replace("text_line_min_width: 320", "text_line_min_width: 320 pad_to_batch: true")
    )
    # the detector sorting its quadrilaterals as rapidocr 3.10's TextDetector does
    lines = repo / "text_detector_lines"
    _place(repo / "text_detector_image" / "1" / "model.onnx", lines / "1" / "model.onnx")
    config = (CONFIGS / "text_detector_image.pbtxt").read_text()
    config = config.replace('name: "text_detector_image"', 'name: "text_detector_lines"')
    (lines / "config.pbtxt").write_text(
        config.replace("max_candidates: 1000", "max_candidates: 1000 reading_order: LINE_GROUPS")
    )
    # all fifteen pages in one /detect call: their variable-size tensors (up to 3 x 736 x 3744) and
    # the executions stacked from them are counted in admission, ~380 MB at once
    running = start_server(repo, repo.parent / "server.log", "--max-inflight-bytes", str(512 * 2**20))
    yield running
    running.stop()


def png(bgr: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(bgr[:, :, ::-1])).save(buffer, format="PNG")
    return buffer.getvalue()


def post(server: RunningServer, model: str, task: str, images: list[bytes], query: str = "") -> httpx.Response:
    files = [("images", (f"{i}.png", image, "image/png")) for i, image in enumerate(images)]
    url = f"http://{server.http_url}/v2/models/{model}/{task}{query}"
    return httpx.post(url, files=files, timeout=300)


def executions(server: RunningServer, model: str) -> int:
    stats = httpx.get(f"http://{server.http_url}/v2/models/{model}/stats", timeout=30).json()
    return int(stats["model_stats"][0]["execution_count"])


def polygons(result: dict[str, Any]) -> np.ndarray:
    return np.array([d["polygon"] for d in result["detections"]], dtype=np.float32).reshape(-1, 4, 2)


def test_detector_alone_gives_textdetectors_quadrilaterals(server: RunningServer) -> None:
    """All pages in one /detect call: each page at its own size (so pages of different sizes run
    as separate executions, neighbours of one size together), quadrilaterals as TextDetector's."""
    names = list(PAGES)
    before = executions(server, "text_detector_image")
    response = post(server, "text_detector_image", "detect", [ocr.photos()[n] for n in names])
    assert response.status_code == 200, response.text
    for name, result in zip(names, response.json()["results"], strict=True):
        expected = np.array(ocr.reference()[name]["detector"], dtype=np.float32).reshape(-1, 4, 2)
        found = polygons(result)
        assert found.shape == expected.shape, name
        assert np.abs(found - expected).max(initial=0.0) <= PIXEL_TOLERANCE, name
        for detection, quad in zip(result["detections"], found, strict=True):
            assert detection["box"] == [quad[:, 0].min(), quad[:, 1].min(), quad[:, 0].max(), quad[:, 1].max()]
    shapes = [ocr.bgr(ocr.photos()[n]).shape[:2] for n in names]
    input_sizes = [sizes.limit_side(w, h, 736, sizes.LimitType.MIN) for h, w in shapes]
    runs = 1 + sum(a != b for a, b in zip(input_sizes, input_sizes[1:], strict=False))
    assert len(set(input_sizes)) > 1  # the call mixes sizes
    assert executions(server, "text_detector_image") - before == runs


def test_detector_sorting_line_groups_gives_rapidocr_3s_order(server: RunningServer) -> None:
    """``dbnet { reading_order: LINE_GROUPS }``: the quadrilaterals in the order rapidocr 3.10's
    TextDetector returns them (model_repo/ocr/reference_lines.json), also on turned receipts
    where 1.4.4's sort differs; the default detector keeps the contour order (test above)."""
    pages = {**{n: ocr.photos()[n] for n in ("page", "page_left_crop", "page_wide_strip")}, **ocr.tilted()}
    response = post(server, "text_detector_lines", "detect", list(pages.values()))
    assert response.status_code == 200, response.text
    for name, result in zip(pages, response.json()["results"], strict=True):
        expected = np.array(ocr.reference_lines()[name]["detector"], dtype=np.float32).reshape(-1, 4, 2)
        found = polygons(result)
        assert found.shape == expected.shape, name
        assert np.abs(found - expected).max(initial=0.0) <= PIXEL_TOLERANCE, name
    contour_order = post(server, "text_detector_image", "detect", [pages["page"]]).json()["results"][0]
    assert not np.array_equal(polygons(contour_order), polygons(response.json()["results"][0]))


def _crops(server: RunningServer, name: str) -> list[np.ndarray]:
    """RapidOCR's crops of a page: its page preparation, the served detector's quadrilaterals,
    reading order, perspective crops."""
    page = reading.prepare_page(ocr.bgr(ocr.photos()[name]), reading.PageOptions())
    response = post(server, "text_detector_image", "detect", [png(page.pixels)])
    assert response.status_code == 200, response.text
    quads = polygons(response.json()["results"][0])
    return [reading.crop_quad(page.pixels, quads[i]) for i in reading.reading_order(quads)]


def test_classifier_and_recognizer_alone_match_their_reference_classes(server: RunningServer) -> None:
    seen = 0
    for name in PAGES:
        expected = ocr.reference()[name]["crops"]
        crops = _crops(server, name)
        digest = ocr.reference_module().crop_digest
        assert [digest(crop)["sha256"] for crop in crops] == [crop["sha256"] for crop in expected], name
        if not crops:
            continue
        lines = [png(crop) for crop in crops]
        angles = post(server, "text_angle_image", "classify", lines, "?top_k=1")
        read = post(server, "text_recognizer_image", "recognize", lines)
        assert angles.status_code == 200 and read.status_code == 200, (angles.text, read.text)
        for angle, line, want in zip(angles.json()["results"], read.json()["results"], expected, strict=True):
            [best] = angle["classes"]
            assert best["label"] == want["angle"]["label"]
            assert best["score"] == pytest.approx(want["angle"]["score"], abs=SCORE_TOLERANCE)
            assert line["text"] == want["recognised"]["text"]
            assert line["score"] == pytest.approx(want["recognised"]["score"], abs=SCORE_TOLERANCE)
            seen += 1
    assert seen == 26


def test_v2_outputs_over_rest_and_grpc(server: RunningServer) -> None:
    """The detector's ``detection_polygons`` over REST, the recogniser's ``TEXT`` / ``TEXT_SCORE``
    over gRPC, for encoded images sent as BYTES."""
    name = "page_left_crop"
    expected = np.array(ocr.reference()[name]["detector"], dtype=np.float32)
    rest = thttp.InferenceServerClient(server.http_url, network_timeout=120)
    image = thttp.InferInput("x", [1], "BYTES")
    image.set_data_from_numpy(np.array([ocr.photos()[name]], dtype=object), binary_data=True)
    wanted = [thttp.InferRequestedOutput(n) for n in ("num_detections", "detection_polygons")]
    found = rest.infer("text_detector_image", [image], outputs=wanted)
    count = int(found.as_numpy("num_detections")[0, 0])
    assert count == len(expected)
    assert found.as_numpy("detection_polygons").shape == (1, 1000, 4, 2)
    assert np.abs(found.as_numpy("detection_polygons")[0, :count] - expected).max() <= PIXEL_TOLERANCE
    metadata = rest.get_model_metadata("text_recognizer_image")
    assert {"TEXT", "TEXT_SCORE"} <= {output["name"] for output in metadata["outputs"]}
    rest.close()

    crops = _crops(server, name)
    want = ocr.reference()[name]["crops"]
    widths = {sizes.recognition_width([c.shape[1] / c.shape[0]], 48, 320) for c in crops}
    assert len(widths) > 1  # lines of different widths: separate executions, one answer
    grpc = tgrpc.InferenceServerClient(server.grpc_url)
    lines = tgrpc.InferInput("x", [len(crops)], "BYTES")
    lines.set_data_from_numpy(np.array([png(c) for c in crops], dtype=object))
    outputs = [tgrpc.InferRequestedOutput("TEXT"), tgrpc.InferRequestedOutput("TEXT_SCORE")]
    found = grpc.infer("text_recognizer_image", [lines], outputs=outputs)
    assert [t.decode("utf-8") for t in found.as_numpy("TEXT")] == [c["recognised"]["text"] for c in want]
    np.testing.assert_allclose(
        found.as_numpy("TEXT_SCORE"), [c["recognised"]["score"] for c in want], atol=SCORE_TOLERANCE, rtol=0
    )
    assert found.as_numpy("TEXT_SCORE").dtype == np.float32
    # The raw probabilities of lines of different widths have different shapes: no one tensor holds them.
    with pytest.raises(Exception, match="different shape for images of different sizes"):
        grpc.infer("text_recognizer_image", [lines], outputs=[tgrpc.InferRequestedOutput("softmax_11.tmp_0")])
    grpc.close()


def test_wrong_endpoints_and_options_get_precise_errors(server: RunningServer) -> None:
    page = ocr.photos()["page_wide_strip"]
    response = post(server, "text_detector_image", "detect", [page], "?iou_threshold=0.5")
    assert response.status_code == 400 and "applies no NMS" in response.json()["error"]
    response = post(server, "text_detector_image", "recognize", [page])
    assert response.status_code == 400 and "use /detect" in response.json()["error"]
    response = post(server, "text_recognizer_image", "classify", [page])
    assert response.status_code == 400 and "use /recognize" in response.json()["error"]
    response = post(server, "text_recognizer_image", "recognize", [b"not an image"])
    assert response.status_code == 400 and "not a recognised image format" in response.json()["error"]
    response = post(server, "text_detector_image", "detect", [page], "?score_threshold=0.99")
    assert response.status_code == 200 and response.json()["results"][0]["detections"] == []


def test_client_recognize_and_polygons(server: RunningServer) -> None:
    """``ferry_client``: ``recognize()`` gives each line's ``TextLine``; ``detect()`` carries the
    quadrilaterals as ``Detection.polygon``."""
    from ferry_client import HttpClient
    from ferry_client.images import TextLine

    name = "page_left_crop"
    crops = [png(crop) for crop in _crops(server, name)]
    want = ocr.reference()[name]["crops"]
    with HttpClient(server.http_url, timeout=120) as client:
        one = client.recognize("text_recognizer_image", crops[0])
        lines = client.recognize("text_recognizer_image", crops)
        found = client.detect("text_detector_image", ocr.photos()[name])
    assert isinstance(one, TextLine) and one.text == want[0]["recognised"]["text"]
    assert isinstance(lines, list) and [line.text for line in lines] == [c["recognised"]["text"] for c in want]
    assert all(isinstance(line, TextLine) for line in lines)
    expected = np.array(ocr.reference()[name]["detector"], dtype=np.float32)
    assert np.abs(np.array([d.polygon for d in found]) - expected).max() <= PIXEL_TOLERANCE


def test_pad_to_batch_runs_lines_of_different_widths_together(server: RunningServer) -> None:
    """With ``pad_to_batch`` a request's lines share one execution, each padded with zeros to the
    widest; the widest line (no padding) reads as alone. The others see the padding, so their
    answers may differ from the single-line reference (measured: 27 of 92 reference lines lose or
    change a character), which is why it is an explicit option."""
    name = "page_left_crop"
    crops = _crops(server, name)
    widths = [sizes.recognition_width([c.shape[1] / c.shape[0]], 48, 320) for c in crops]
    assert len(set(widths)) > 1
    stats = f"http://{server.http_url}/v2/models/text_recognizer_padded/stats"
    before = httpx.get(stats, timeout=30).json()["model_stats"][0]
    response = post(server, "text_recognizer_padded", "recognize", [png(c) for c in crops])
    assert response.status_code == 200, response.text
    after = httpx.get(stats, timeout=30).json()["model_stats"][0]
    assert after["execution_count"] - before["execution_count"] == 1
    assert after["inference_count"] - before["inference_count"] == len(crops)
    widest = int(np.argmax(widths))
    line, want = response.json()["results"][widest], ocr.reference()[name]["crops"][widest]["recognised"]
    assert line["text"] == want["text"]
    assert line["score"] == pytest.approx(want["score"], abs=SCORE_TOLERANCE)
