"""The steps around the three OCR models, as rapidocr_onnxruntime 1.4.4's ``RapidOCR`` runs them:
bound the page size, pad very flat pages, sort the boxes into reading order, cut a perspective
crop per box, turn crops the angle classifier reads as upside down, group crops into recognition
batches and map the boxes back to the caller's pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import cv2
import numpy as np

from ...errors import InvalidArgument
from .sizes import recognition_width
from .warp import warp_perspective_cubic


@dataclass(frozen=True)
class PageOptions:
    """RapidOCR's page-level settings (its ``Global`` config defaults)."""

    max_side: int = 2000
    min_side: int = 30
    min_height: int = 30
    width_height_ratio: float = 8.0
    text_score: float = 0.5
    angle_threshold: float = 0.9
    recognition_batch: int = 6
    recognition_height: int = 48
    recognition_min_width: int = 320
    #: Bounds what one page costs (not in the reference): the detector's input pixels (0: twice
    #: ``max_side`` squared) and the text boxes recognised; past either the page is refused (400).
    max_detector_pixels: int = 0
    max_text_boxes: int = 500


@dataclass(frozen=True)
class Page:
    """The image the detector sees and how to map its pixels back to the original."""

    pixels: np.ndarray
    ratio_width: float
    ratio_height: float
    top: int
    original_width: int
    original_height: int


@dataclass(frozen=True)
class PagePlan:
    """``prepare_page``'s sizes, known from the page's size alone (before it is decoded)."""

    resized: tuple[int, int] | None  # (width, height) the page is resized to, None when kept
    ratio_width: float
    ratio_height: float
    top: int  # black rows added above and below

    def size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of the prepared page of a ``width`` x ``height`` original."""
        new_width, new_height = self.resized or (width, height)
        return new_width, new_height + 2 * self.top


def plan_page(width: int, height: int, options: PageOptions) -> PagePlan:
    """Shrink a page whose longer side exceeds ``max_side``, enlarge one whose shorter side is
    below ``min_side`` (each to multiples of 32), then pad a page at most ``min_height`` tall or
    wider than ``width_height_ratio`` with black rows above and below. A page that rounds to no
    rows or columns is refused (InvalidArgument)."""
    resized: tuple[int, int] | None = None
    ratio_height = ratio_width = 1.0
    if max(height, width) > options.max_side:
        resized = _side_size(width, height, options.max_side, shrink=True)
        ratio_height, ratio_width = height / resized[1], width / resized[0]
    current_width, current_height = resized or (width, height)
    if min(current_width, current_height) < options.min_side:
        resized = _side_size(current_width, current_height, options.min_side, shrink=False)
        ratio_height, ratio_width = current_height / resized[1], current_width / resized[0]
    resized_width, resized_height = resized or (width, height)
    top = 0
    too_flat = options.width_height_ratio != -1 and resized_width / resized_height > options.width_height_ratio
    if resized_height <= options.min_height or too_flat:
        padded_height = max(int(resized_width / options.width_height_ratio), options.min_height) * 2
        top = int(abs(padded_height - resized_height) / 2)
    return PagePlan(resized, ratio_width, ratio_height, top)


def prepare_page(bgr: np.ndarray, options: PageOptions) -> Page:
    """The page the detector sees, as ``plan_page`` sizes it."""
    height, width = bgr.shape[:2]
    plan = plan_page(width, height, options)
    pixels = bgr if plan.resized is None else cv2.resize(bgr, plan.resized)
    if plan.top:
        pixels = cv2.copyMakeBorder(pixels, plan.top, plan.top, 0, 0, cv2.BORDER_CONSTANT, value=(0, 0, 0))
    return Page(pixels, plan.ratio_width, plan.ratio_height, plan.top, width, height)


def _side_size(width: int, height: int, side: int, shrink: bool) -> tuple[int, int]:
    """(width, height) of the page scaled so its longer (``shrink``) or shorter side is ``side``,
    each side rounded to a multiple of 32."""
    ratio = float(side) / (max(height, width) if shrink else min(height, width))
    new_height = int(round(int(height * ratio) / 32) * 32)
    new_width = int(round(int(width * ratio) / 32) * 32)
    if new_height <= 0 or new_width <= 0:
        raise InvalidArgument(f"a {width}x{height} page rounds to no rows or columns when sized for OCR")
    return new_width, new_height


class ReadingOrder(str, Enum):
    """How text boxes are ordered: each reference's convention (the README's options table)."""

    #: As the contours were found: rapidocr_onnxruntime 1.4.4's ``TextDetector``.
    CONTOUR_ORDER = "contour_order"
    #: 1.4.4's ``RapidOCR.sorted_boxes`` (``neighbour_swap``).
    NEIGHBOUR_SWAP = "neighbour_swap"
    #: rapidocr 2 and later: their ``TextDetector.sorted_boxes`` groups lines.
    LINE_GROUPS = "line_groups"


#: Top-left corners less than this far apart in y are one line (both sorts).
LINE_THRESHOLD = 10


def reading_order(quads: np.ndarray, order: ReadingOrder = ReadingOrder.NEIGHBOUR_SWAP) -> list[int]:
    """Indices of the quadrilaterals in ``order`` (``CONTOUR_ORDER``: as they are)."""
    if order == ReadingOrder.LINE_GROUPS:
        return _line_groups(quads)
    if order == ReadingOrder.NEIGHBOUR_SWAP:
        return _neighbour_swap(quads)
    return list(range(len(quads)))


def _neighbour_swap(quads: np.ndarray) -> list[int]:
    """Sorted by the top-left corner (y, then x), then a box whose top-left y is within 10 px of
    the previous box's and lies to its left moves before it (bubbling back while that holds)."""
    order = sorted(range(len(quads)), key=lambda i: (quads[i][0][1], quads[i][0][0]))
    for i in range(len(order) - 1):
        for j in range(i, -1, -1):
            upper, lower = quads[order[j]][0], quads[order[j + 1]][0]
            if abs(lower[1] - upper[1]) < LINE_THRESHOLD and lower[0] < upper[0]:
                order[j], order[j + 1] = order[j + 1], order[j]
            else:
                break
    return order


def _line_groups(quads: np.ndarray) -> list[int]:
    """Stable-sorted by the top-left corner's y; a box less than 10 px below the one before it
    joins that box's line (so a line can drift down a slope); each line left to right by the
    top-left x, ties kept in y order."""
    if len(quads) == 0:
        return []
    corners = np.asarray(quads)[:, 0, :]
    by_y = np.argsort(corners[:, 1], kind="stable")
    lines = np.concatenate([[0], np.cumsum(np.diff(corners[by_y, 1]) >= LINE_THRESHOLD)])
    return by_y[np.lexsort((corners[by_y, 0], lines))].tolist()


class CropWarp(str, Enum):
    """Which warp cuts the text-line crops (OpenCV releases move their pixels)."""

    #: ``cv2.warpPerspective`` of the installed OpenCV (4.10 under Ferry's pin).
    OPENCV = "opencv"
    #: ``warp.warp_perspective_cubic``: OpenCV 4.10's pixels whichever OpenCV is installed (numpy,
    #: about 15 times slower).
    OPENCV_4_10 = "opencv_4_10"


def crop_size(quad: np.ndarray) -> tuple[int, int]:
    """(width, height) of a quadrilateral's crop: the longer of each pair of opposite edges (truncated)."""
    points = quad.astype(np.float32)
    width = int(max(np.linalg.norm(points[0] - points[1]), np.linalg.norm(points[2] - points[3])))
    height = int(max(np.linalg.norm(points[0] - points[3]), np.linalg.norm(points[1] - points[2])))
    return width, height


def crop_quad(bgr: np.ndarray, quad: np.ndarray, warp: CropWarp = CropWarp.OPENCV) -> np.ndarray:
    """The quadrilateral warped to an upright rectangle (bicubic, replicated border), its size
    ``crop_size``; turned 90 degrees counter-clockwise when it comes out at least 1.5 times taller
    than wide (vertical text)."""
    points = quad.astype(np.float32)
    width, height = crop_size(quad)
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(points, target)  # the same matrix under OpenCV 4.10 and 5.0
    if warp == CropWarp.OPENCV_4_10:
        crop = warp_perspective_cubic(bgr, matrix, width, height)
    else:
        crop = cv2.warpPerspective(bgr, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    if crop.shape[0] * 1.0 / crop.shape[1] >= 1.5:
        crop = np.rot90(crop)
    return crop


def upright(crop: np.ndarray, label: str, score: float, threshold: float) -> np.ndarray:
    """The crop turned 180 degrees when the angle classifier says "180" above ``threshold``."""
    return cv2.rotate(crop, cv2.ROTATE_180) if "180" in label and score > threshold else crop


def recognition_batches(crops: Sequence[np.ndarray], options: PageOptions) -> list[tuple[list[int], int]]:
    """Crop indices grouped as the reference groups them (sorted by aspect ratio, then
    ``recognition_batch`` at a time) with each group's tensor width (its widest line)."""
    ratios = [crop.shape[1] / float(crop.shape[0]) for crop in crops]
    order = np.argsort(np.array(ratios)).tolist()
    batches = []
    for start in range(0, len(order), options.recognition_batch):
        members = order[start : start + options.recognition_batch]
        width = recognition_width(
            [ratios[i] for i in members], options.recognition_height, options.recognition_min_width
        )
        batches.append((members, width))
    return batches


def to_original(quads: np.ndarray, page: Page) -> np.ndarray:
    """Detector-image corners to the caller's pixels: padding removed, ratios applied, clipped to
    0..width and 0..height (float32)."""
    mapped = np.asarray(quads, dtype=np.float32).reshape(-1, 4, 2).copy()
    mapped[:, :, 1] -= page.top
    mapped[:, :, 0] *= page.ratio_width
    mapped[:, :, 1] *= page.ratio_height
    mapped = np.where(mapped < 0, 0, mapped)
    mapped[..., 0] = np.minimum(mapped[..., 0], page.original_width)
    mapped[..., 1] = np.minimum(mapped[..., 1], page.original_height)
    return mapped.astype(np.float32)
