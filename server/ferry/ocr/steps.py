"""The CPU work of one OCR page between the model executions (blocking: run in a worker thread).

Each function is one hop of ``RapidOCR.__call__``: decode and size the page, cut the crops the
detector's map describes, build the angle and recognition batches, and assemble the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgument
from ..pipelines.decode import decode_image, decoding_cost, read_header
from ..pipelines.text import db, reading, tensors
from ..pipelines.text.sizes import limit_side
from .settings import OcrSettings

#: The angle classifier's classes, as rapidocr's ``label_list``.
ANGLE_LABELS = ("0", "180")
#: The angle classifier's input: height 48, width 192.
ANGLE_HEIGHT, ANGLE_WIDTH = 48, 192


#: Bytes the detector stage holds per pixel of its input: the resized page (3), the tensor (12)
#: and its copy in the detector's batch (12), the probability map (4) and the decoder's bitmaps
#: (3). ONNX Runtime's own working memory for the run is counted by the path while the detector
#: step runs (the detector's ``working_memory_factor``, ``inference/working_memory.py``).
DETECTOR_BYTES_PER_PIXEL = 34
#: Recognition batches in flight at once for one page; each is CTC-decoded as soon as it returns,
#: so a page's probabilities (~1 MB a line) are held for this many batches, not for every line.
RECOGNITION_WINDOW = 2


@dataclass
class PageWork:
    """One page on its way through the stages."""

    page: reading.Page
    detector_input: np.ndarray | None  # (1, 3, H, W), None when the page rounds to nothing
    quads: np.ndarray | None = None  # (N, 4, 2) in the detector image's pixels, reading order
    crops: list[np.ndarray] | None = None


def page_cost(data: bytes, settings: OcrSettings, max_pixels: int) -> int:
    """Bytes decoding the page and running its detector stage hold, from its header alone (0 for
    a page decoding refuses: it says why); refused here (400) when the detector's input would pass
    ``max_detector_pixels`` however the page comes out (turned by its EXIF or not)."""
    header = read_header(data)
    if header is None or not 0 < header.width * header.height <= max_pixels:
        return 0
    # the page as an array and in BGR order, besides what decoding holds
    detector = header.costliest(lambda width, height: _detector_cost(width, height, settings))
    return decoding_cost(header) + 6 * header.width * header.height + detector


def _detector_cost(width: int, height: int, settings: OcrSettings) -> int:
    """Bytes of the prepared page and the detector stage of a ``width`` x ``height`` page."""
    plan = reading.plan_page(width, height, settings.page)
    page_width, page_height = plan.size(width, height)
    detector = _detector_pixels(page_width, page_height, settings)
    prepared = 3 * page_width * page_height * ((plan.resized is not None) + (plan.top > 0))
    return prepared + DETECTOR_BYTES_PER_PIXEL * detector


def _detector_pixels(page_width: int, page_height: int, settings: OcrSettings) -> int:
    """Pixels of the detector's input for a prepared page; refused past ``max_detector_pixels``."""
    width, height = limit_side(page_width, page_height, settings.limit_side_len, settings.limit_type)
    limit = settings.page.max_detector_pixels
    if width * height > limit:
        raise InvalidArgument(
            f"page: its detector input would be {width}x{height} ({width * height} pixels, from a "
            f"{page_width}x{page_height} page at limit_side_len {settings.limit_side_len}), more than the limit of "
            f"{limit} (parameters 'max_detector_pixels')"
        )
    return max(0, width) * max(0, height)


def start_page(data: bytes, settings: OcrSettings, max_pixels: int) -> PageWork:
    """Decode (as BGR, the order the models were trained in), bound and pad the page, and build
    the detector's input at the size rule's size."""
    rgb = np.asarray(decode_image(data, max_pixels=max_pixels))
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    page = reading.prepare_page(bgr, settings.page)
    _detector_pixels(page.pixels.shape[1], page.pixels.shape[0], settings)  # as it came out (EXIF)
    tensor = tensors.detector_tensor(page.pixels, settings.limit_side_len, settings.limit_type)
    return PageWork(page, None if tensor is None else tensor[None])


def find_text(work: PageWork, probabilities: np.ndarray, settings: OcrSettings, classes: int) -> int:
    """Quadrilaterals from the detector's map, in reading order (refused past ``max_text_boxes``);
    returns the bytes the later stages will hold for them: the page they are cut from, the crops,
    the angle classifier's batch and its copy, and ``RECOGNITION_WINDOW`` recognition batches with
    their probabilities."""
    height, width = work.page.pixels.shape[:2]
    quads, _ = db.text_quads(probabilities.reshape(probabilities.shape[-2:]), width, height, settings.db)
    limit = settings.page.max_text_boxes
    if len(quads) > limit:
        raise InvalidArgument(
            f"page: {len(quads)} text boxes found, more than the limit of {limit} (parameters 'max_text_boxes')"
        )
    work.quads = quads[reading.reading_order(quads, settings.reading_order)]
    sides = [reading.crop_size(quad) for quad in work.quads]
    crops = sum(3 * crop_width * crop_height for crop_width, crop_height in sides)
    angle = len(sides) * 2 * 3 * ANGLE_HEIGHT * ANGLE_WIDTH * 4
    page = settings.page
    # a line's tensor and probabilities, at its own width (batches are as wide as their widest)
    lines = sorted(
        page.recognition_height * max(w / max(h, 1), page.recognition_min_width / page.recognition_height)
        for w, h in (size if size[1] < 1.5 * size[0] else size[::-1] for size in sides)
    )
    widest = lines[-page.recognition_batch * RECOGNITION_WINDOW :]
    recognition = sum(int(w) * (2 * 3 * page.recognition_height * 4 + classes * 4 // 8) for w in widest)
    return work.page.pixels.nbytes + crops + angle + recognition


def cut_crops(work: PageWork, settings: OcrSettings) -> np.ndarray | None:
    """The crops of the quadrilaterals; the angle classifier's batch (None when no text was found)."""
    assert work.quads is not None
    work.crops = [reading.crop_quad(work.page.pixels, quad, settings.crop_warp) for quad in work.quads]
    if not work.crops:
        return None
    return np.stack([tensors.text_line_tensor(crop, ANGLE_HEIGHT, ANGLE_WIDTH) for crop in work.crops])


def turn_crops(work: PageWork, angle_probabilities: np.ndarray, settings: OcrSettings) -> list[tuple[list[int], int]]:
    """Crops the classifier reads as upside down turned, then the recognition batches: crop
    indices and their tensor's width, grouped as the reference does."""
    assert work.crops is not None
    best = angle_probabilities.argmax(axis=1)
    work.crops = [
        reading.upright(crop, ANGLE_LABELS[int(label)], float(row[label]), settings.page.angle_threshold)
        for crop, label, row in zip(work.crops, best, angle_probabilities, strict=True)
    ]
    return reading.recognition_batches(work.crops, settings.page)


def recognition_tensor(work: PageWork, members: list[int], width: int, settings: OcrSettings) -> np.ndarray:
    """The (n, 3, 48, W) recognition batch of the crops ``members``, padded as the reference does."""
    assert work.crops is not None
    height = settings.page.recognition_height
    return np.stack([tensors.text_line_tensor(work.crops[i], height, width) for i in members])


def finish(
    work: PageWork, read: Sequence[tuple[list[int], list[tuple[str, float]]]], settings: OcrSettings
) -> dict[str, np.ndarray]:
    """Drop lines below ``text_score`` and map the boxes to the caller's pixels (``read``: each
    recognition batch's crop indices and their text and confidence): ``boxes`` (N, 4, 2) FP32,
    ``text`` (N,) UTF-8 bytes, ``scores`` (N,) FP32."""
    assert work.quads is not None
    lines: list[tuple[str, float]] = [("", 0.0)] * len(work.quads)
    for members, decoded in read:
        for index, line in zip(members, decoded, strict=True):
            lines[index] = line
    boxes = reading.to_original(work.quads, work.page)
    keep = [i for i, (_, score) in enumerate(lines) if score >= settings.page.text_score]
    return result(boxes[keep], [lines[i][0] for i in keep], [lines[i][1] for i in keep])


def result(boxes: np.ndarray, texts: list[str], scores: list[float]) -> dict[str, np.ndarray]:
    """The OCR model's outputs (also for a page without text: zero lines)."""
    text = np.empty(len(texts), dtype=object)
    text[:] = [t.encode("utf-8") for t in texts]
    return {
        "boxes": np.asarray(boxes, dtype=np.float32).reshape(-1, 4, 2),
        "text": text,
        "scores": np.asarray(scores, dtype=np.float32),
    }
