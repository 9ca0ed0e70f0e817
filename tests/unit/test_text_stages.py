"""The OCR stages (size rules, DBNet decoding, CTC, reading order, crops, page preparation)
checked against rapidocr_onnxruntime 1.4.4's own answers (``model_repo/ocr/reference.json``),
with the real models run by onnxruntime, and against hand-worked cases of the reference's
arithmetic."""

from __future__ import annotations

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from ferry.pipelines.text import ctc, db, reading, sizes, tensors, warp
from tests import ocr_reference as ocr

#: Small enough to keep this file fast (the detector runs at a 736-pixel short side): a plain
#: scan, a turned one, an upside-down page, a crop and a page wide enough to be padded.
CASES = ("page", "page_turned_90", "text_upside_down", "page_left_crop", "page_wide_strip")


@pytest.fixture(scope="module")
def sessions() -> dict[str, ort.InferenceSession]:
    repository = ocr.ensure_models()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return {name: ort.InferenceSession(str(repository / name / "1" / "model.onnx"), options) for name in ocr.MODELS}


def detect(sessions: dict[str, ort.InferenceSession], bgr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tensor = tensors.detector_tensor(bgr, 736, sizes.LimitType.MIN)
    assert tensor is not None
    probabilities = sessions["text_detector"].run(None, {"x": tensor[None]})[0][0, 0]
    return db.text_quads(probabilities, bgr.shape[1], bgr.shape[0], db.DbOptions())


def test_limit_side_scales_then_rounds_to_multiples_of_32() -> None:
    # 448x172 (skimage text): short side to 736, ratio 4.279..., int(1917.0) = 1917 -> 1920.
    assert sizes.limit_side(448, 172, 736, sizes.LimitType.MIN) == (1920, 736)
    # Already large enough: only rounded; 48 / 32 = 1.5 rounds to even (2 -> 64), 80 / 32 = 2.5 -> 2.
    assert sizes.limit_side(800, 760, 736, sizes.LimitType.MIN) == (800, 768)
    assert sizes.limit_side(48, 80, 10, sizes.LimitType.MIN) == (64, 64)
    # MAX shrinks the longer side only.
    assert sizes.limit_side(1920, 1080, 960, sizes.LimitType.MAX) == (960, 544)
    assert sizes.limit_side(10, 10, 960, sizes.LimitType.MAX) == (0, 0)


def test_text_line_width_keeps_the_ratio_up_to_the_cap() -> None:
    assert sizes.text_line_width(100, 33, 48, 192) == 146  # ceil(48 * 3.0303...) = 146
    assert sizes.text_line_width(400, 20, 48, 192) == 192
    assert sizes.recognition_width([2.0, 3.5], 48, 320) == 320
    assert sizes.recognition_width([2.0, 9.51], 48, 320) == 456  # int(48 * 9.51)


def test_text_line_tensor_pads_the_right_with_zeros() -> None:
    line = np.full((10, 20, 3), 255, dtype=np.uint8)
    tensor = tensors.text_line_tensor(line, 48, 192)
    assert tensor.shape == (3, 48, 192)
    assert np.all(tensor[:, :, :96] == 1.0) and np.all(tensor[:, :, 96:] == 0.0)


def test_ctc_merges_repeats_and_drops_blanks() -> None:
    chars = ctc.ctc_characters(["a", "b"])  # blank, a, b, space
    steps = [1, 1, 0, 1, 2, 2, 3, 0]
    probabilities = np.full((1, len(steps), 4), 0.05, dtype=np.float32)
    for t, index in enumerate(steps):
        probabilities[0, t, index] = 0.5 + 0.05 * t
    [(text, score)] = ctc.ctc_greedy(probabilities, chars)
    assert text == "aab "  # a (repeat merged), blank splits, a, b (merged), space
    kept = [0.5, 0.65, 0.7, 0.8]  # the first step of each run, blanks out
    assert score == pytest.approx(np.mean(np.array(kept, dtype=np.float32).astype(np.float64)))
    assert ctc.ctc_greedy(np.eye(4, dtype=np.float32)[[0, 0]][None], chars) == [("", 0.0)]


def test_reading_order_swaps_boxes_on_one_line() -> None:
    def quad(x: float, y: float) -> list[list[float]]:
        return [[x, y], [x + 5, y], [x + 5, y + 5], [x, y + 5]]

    quads = np.array([quad(50, 12), quad(10, 40), quad(5, 15), quad(90, 11)], dtype=np.float32)
    # Sorted by y: (90, 11), (50, 12), (5, 15), (10, 40); within 10 px a box to the left moves up.
    assert reading.reading_order(quads) == [2, 0, 3, 1]


def test_line_groups_chain_a_drifting_line_where_neighbour_swaps_stop() -> None:
    def quad(x: float, y: float) -> list[list[float]]:
        return [[x, y], [x + 5, y], [x + 5, y + 5], [x, y + 5]]

    # A line drifting down 5 then 7 px: one line for LINE_GROUPS (each step < 10), but 1.4.4's swap
    # stops at the third box, 12 px below the first.
    quads = np.array([quad(100, 0), quad(0, 5), quad(50, 12)], dtype=np.float32)
    assert reading.reading_order(quads, reading.ReadingOrder.LINE_GROUPS) == [1, 2, 0]
    assert reading.reading_order(quads, reading.ReadingOrder.NEIGHBOUR_SWAP) == [1, 0, 2]
    assert reading.reading_order(quads, reading.ReadingOrder.CONTOUR_ORDER) == [0, 1, 2]
    assert reading.reading_order(quads[:0], reading.ReadingOrder.LINE_GROUPS) == []


@pytest.mark.parametrize("name", sorted(ocr.reference()))
def test_line_groups_sort_the_reference_quads_as_rapidocr_3(name: str) -> None:
    """rapidocr 3.10's TextDetector sorts itself: 1.4.4's quadrilaterals (contour order) sorted
    LINE_GROUPS are its boxes, in its order, on every reference page."""
    contours = np.array(ocr.reference()[name]["detector"], dtype=np.float32).reshape(-1, 4, 2)
    expected = np.array(ocr.reference_lines()[name]["detector"], dtype=np.float32).reshape(-1, 4, 2)
    assert np.array_equal(contours[reading.reading_order(contours, reading.ReadingOrder.LINE_GROUPS)], expected)


@pytest.mark.parametrize("name", ["receipt_turned_2", "receipt_turned_4"])
def test_line_groups_read_a_turned_receipt_as_rapidocr_3(sessions: dict[str, ort.InferenceSession], name: str) -> None:
    """On a page turned 2 or 4 degrees the sorts disagree (1.4.4 moves a rising line's first word
    after the others); LINE_GROUPS gives rapidocr 3.10's order."""
    quads, _ = detect(sessions, ocr.bgr(ocr.tilted()[name]))
    expected = np.array(ocr.reference_lines()[name]["detector"], dtype=np.float32).reshape(-1, 4, 2)
    assert np.array_equal(quads[reading.reading_order(quads, reading.ReadingOrder.LINE_GROUPS)], expected)
    assert not np.array_equal(quads[reading.reading_order(quads, reading.ReadingOrder.NEIGHBOUR_SWAP)], expected)


def test_flat_pages_are_padded_top_and_bottom() -> None:
    strip = np.zeros((40, 384, 3), dtype=np.uint8)
    page = reading.prepare_page(strip, reading.PageOptions())
    assert page.top == 28 and page.pixels.shape == (96, 384, 3)  # max(int(384 / 8), 30) * 2 = 96
    tiny = reading.prepare_page(np.zeros((20, 50, 3), dtype=np.uint8), reading.PageOptions())
    assert tiny.pixels.shape[:2] == (32, 64)  # short side to 30: 20 * 1.5 = 30 -> 32, 75 -> 64


@pytest.mark.parametrize("name", CASES)
def test_detector_quads_match_the_reference(sessions: dict[str, ort.InferenceSession], name: str) -> None:
    quads, scores = detect(sessions, ocr.bgr(ocr.photos()[name]))
    expected = np.array(ocr.reference()[name]["detector"], dtype=np.float32).reshape(-1, 4, 2)
    assert quads.shape == expected.shape and len(scores) == len(quads)
    assert np.array_equal(quads, expected)
    assert np.all(scores >= 0.5)


@pytest.mark.parametrize("name", CASES)
def test_crops_angles_and_text_match_the_reference(sessions: dict[str, ort.InferenceSession], name: str) -> None:
    expected = ocr.reference()[name]["crops"]
    page = reading.prepare_page(ocr.bgr(ocr.photos()[name]), reading.PageOptions())
    quads, _ = detect(sessions, page.pixels)
    crops = [reading.crop_quad(page.pixels, quads[i]) for i in reading.reading_order(quads)]
    assert len(crops) == len(expected)
    characters = ctc.ctc_characters(ocr.characters())
    for crop, want in zip(crops, expected, strict=True):
        assert ocr.reference_module().crop_digest(crop) == {"shape": want["shape"], "sha256": want["sha256"]}
        angle = sessions["text_angle"].run(None, {"x": tensors.text_line_tensor(crop, 48, 192)[None]})[0][0]
        assert ["0", "180"][int(angle.argmax())] == want["angle"]["label"]
        assert float(angle.max()) == pytest.approx(want["angle"]["score"], abs=1e-5)
        width = sizes.recognition_width([crop.shape[1] / crop.shape[0]], 48, 320)
        line = sessions["text_recognizer"].run(None, {"x": tensors.text_line_tensor(crop, 48, width)[None]})[0]
        [(text, score)] = ctc.ctc_greedy(line, characters)
        assert text == want["recognised"]["text"]
        assert score == pytest.approx(want["recognised"]["score"], abs=1e-5)


@pytest.mark.parametrize("name", CASES)
def test_numpy_warp_cuts_the_references_crops(sessions: dict[str, ort.InferenceSession], name: str) -> None:
    """``crop_warp: opencv_4_10`` (numpy) cuts the crops rapidocr_onnxruntime 1.4.4 cut under
    OpenCV 4.10 (same SHA-256), pixel for pixel what the pinned cv2.warpPerspective gives; under
    OpenCV 5.0 cv2 cuts other pixels (every crop of these pages differs, measured)."""
    expected = ocr.reference()[name]["crops"]
    page = reading.prepare_page(ocr.bgr(ocr.photos()[name]), reading.PageOptions())
    quads, _ = detect(sessions, page.pixels)
    ordered = [quads[i] for i in reading.reading_order(quads)]
    crops = [reading.crop_quad(page.pixels, quad, reading.CropWarp.OPENCV_4_10) for quad in ordered]
    digests = [ocr.reference_module().crop_digest(crop) for crop in crops]
    assert digests == [{"shape": want["shape"], "sha256": want["sha256"]} for want in expected]
    grey = cv2.cvtColor(page.pixels, cv2.COLOR_BGR2GRAY)  # one channel, and a matrix that is not a crop's
    matrix = np.array([[0.9, 0.08, 3.5], [-0.05, 1.1, -2.25], [0.0004, -0.0003, 1.0]])
    assert np.array_equal(
        warp.warp_perspective_cubic(grey, matrix, 123, 77),
        cv2.warpPerspective(grey, matrix, (123, 77), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE),
    )
