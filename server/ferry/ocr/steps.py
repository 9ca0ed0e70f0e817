"""The CPU work of one OCR page between the model executions (blocking: run in a worker thread).

Each function is one hop of ``RapidOCR.__call__``: decode and size the page, cut the crops the
detector's map describes, build the angle and recognition batches, and assemble the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..pipelines.decode import decode_image
from ..pipelines.text import ctc, db, reading, tensors
from .settings import OcrSettings

#: The angle classifier's classes, as rapidocr's ``label_list``.
ANGLE_LABELS = ("0", "180")
#: The angle classifier's input: height 48, width 192.
ANGLE_HEIGHT, ANGLE_WIDTH = 48, 192


@dataclass
class PageWork:
    """One page on its way through the stages."""

    page: reading.Page
    detector_input: np.ndarray | None  # (1, 3, H, W), None when the page rounds to nothing
    quads: np.ndarray | None = None  # (N, 4, 2) in the detector image's pixels, reading order
    crops: list[np.ndarray] | None = None


def start_page(data: bytes, settings: OcrSettings, max_pixels: int) -> PageWork:
    """Decode (as BGR, the order the models were trained in), bound and pad the page, and build
    the detector's input at the size rule's size."""
    rgb = np.asarray(decode_image(data, max_pixels=max_pixels))
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    page = reading.prepare_page(bgr, settings.page)
    tensor = tensors.detector_tensor(page.pixels, settings.limit_side_len, settings.limit_type)
    return PageWork(page, None if tensor is None else tensor[None])


def cut_crops(work: PageWork, probabilities: np.ndarray, settings: OcrSettings) -> np.ndarray | None:
    """Quadrilaterals from the detector's map, in reading order, and their crops; the angle
    classifier's batch (None when no text was found)."""
    height, width = work.page.pixels.shape[:2]
    quads, _ = db.text_quads(probabilities.reshape(probabilities.shape[-2:]), width, height, settings.db)
    order = reading.reading_order(quads, settings.reading_order)
    work.quads = quads[order]
    work.crops = [reading.crop_quad(work.page.pixels, quad, settings.crop_warp) for quad in work.quads]
    if not work.crops:
        return None
    return np.stack([tensors.text_line_tensor(crop, ANGLE_HEIGHT, ANGLE_WIDTH) for crop in work.crops])


def turn_crops(
    work: PageWork, angle_probabilities: np.ndarray, settings: OcrSettings
) -> list[tuple[list[int], np.ndarray]]:
    """Crops the classifier reads as upside down turned, then the recognition batches: crop
    indices and their (n, 3, 48, W) tensor, grouped and padded as the reference does."""
    assert work.crops is not None
    best = angle_probabilities.argmax(axis=1)
    work.crops = [
        reading.upright(crop, ANGLE_LABELS[int(label)], float(row[label]), settings.page.angle_threshold)
        for crop, label, row in zip(work.crops, best, angle_probabilities, strict=True)
    ]
    height = settings.page.recognition_height
    return [
        (members, np.stack([tensors.text_line_tensor(work.crops[i], height, width) for i in members]))
        for members, width in reading.recognition_batches(work.crops, settings.page)
    ]


def finish(
    work: PageWork, batches: Sequence[tuple[list[int], np.ndarray]], characters: list[str], settings: OcrSettings
) -> dict[str, np.ndarray]:
    """CTC-decode each batch, drop lines below ``text_score`` and map the boxes to the caller's pixels:
    ``boxes`` (N, 4, 2) FP32, ``text`` (N,) UTF-8 bytes, ``scores`` (N,) FP32."""
    assert work.quads is not None
    lines: list[tuple[str, float]] = [("", 0.0)] * len(work.quads)
    for members, probabilities in batches:
        for index, line in zip(members, ctc.ctc_greedy(probabilities, characters), strict=True):
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
