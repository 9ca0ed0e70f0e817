"""DBNet (Differentiable Binarization) probability map to text quadrilaterals.

The steps and constants follow PaddleOCR's ``DBPostProcess`` and the box filter of its
``TextDetector`` as rapidocr_onnxruntime 1.4.4 runs them: binarise at ``binarize_threshold``,
optionally dilate with a 2x2 kernel, find the contours (OpenCV), fit each a minimum-area rotated
rectangle, score it by the mean probability inside (``fast``: the rectangle; ``slow``: the
contour), grow it by ``area * unclip_ratio / perimeter`` (shapely for area and perimeter,
pyclipper's round-join offset), fit a rectangle again, scale to the source image, round and clip,
order the corners clockwise from the top-left and drop boxes 3 px or thinner.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import pyclipper  # type: ignore[import-untyped]

#: Rectangles whose shorter side is below this (map pixels) are noise; after unclipping, +2.
MIN_SIDE = 3
_DILATION = np.ones((2, 2), dtype=np.uint8)


@dataclass(frozen=True)
class DbOptions:
    """Thresholds of the decoder, with PP-OCRv4's defaults in rapidocr_onnxruntime."""

    binarize_threshold: float = 0.3
    box_threshold: float = 0.5
    unclip_ratio: float = 1.6
    max_candidates: int = 1000
    dilate: bool = True
    slow_score: bool = False


def text_quads(
    probabilities: np.ndarray, source_width: int, source_height: int, options: DbOptions
) -> tuple[np.ndarray, np.ndarray]:
    """Quadrilaterals ((N, 4, 2) float32, corners top-left, top-right, bottom-right, bottom-left,
    whole source pixels) and their scores ((N,) float64) from one (H, W) probability map.

    ``source_width`` x ``source_height`` is the image the map was computed from (before the
    detector's resize)."""
    bitmap: np.ndarray = (probabilities > options.binarize_threshold).astype(np.uint8)
    if options.dilate:
        bitmap = np.asarray(cv2.dilate(bitmap, _DILATION))
    height, width = bitmap.shape
    contours, _ = cv2.findContours(bitmap * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    quads, scores = [], []
    for contour in contours[: options.max_candidates]:
        corners, shorter = _rotated_rectangle(contour)
        if shorter < MIN_SIDE:
            continue
        score = _mean_inside(probabilities, contour.reshape(-1, 2) if options.slow_score else corners)
        if options.box_threshold > score:
            continue
        grown, shorter = _rotated_rectangle(_unclip(corners, options.unclip_ratio))
        if shorter < MIN_SIDE + 2:
            continue
        grown[:, 0] = np.clip(np.round(grown[:, 0] / width * source_width), 0, source_width)
        grown[:, 1] = np.clip(np.round(grown[:, 1] / height * source_height), 0, source_height)
        quad = _clockwise(grown.astype(np.int32))
        quad = _clip_inside(quad, source_width, source_height)
        if int(np.linalg.norm(quad[0] - quad[1])) <= 3 or int(np.linalg.norm(quad[0] - quad[3])) <= 3:
            continue
        quads.append(quad)
        scores.append(score)
    return np.array(quads, dtype=np.float32).reshape(-1, 4, 2), np.array(scores, dtype=np.float64)


def _rotated_rectangle(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The minimum-area rectangle's corners ordered top-left, top-right, bottom-right,
    bottom-left (by x, then y within each pair, as PaddleOCR's ``get_mini_boxes``) and its
    shorter side."""
    rectangle = cv2.minAreaRect(points)
    corners = sorted(cv2.boxPoints(rectangle), key=lambda corner: corner[0])
    left_top, left_bottom = (0, 1) if corners[1][1] > corners[0][1] else (1, 0)
    right_top, right_bottom = (2, 3) if corners[3][1] > corners[2][1] else (3, 2)
    ordered = np.array([corners[left_top], corners[right_top], corners[right_bottom], corners[left_bottom]])
    return ordered, min(rectangle[1])


def _mean_inside(probabilities: np.ndarray, polygon: np.ndarray) -> float:
    """Mean probability inside ``polygon`` (filled with integer-truncated corners, over the
    bounding rows and columns clipped to the map)."""
    height, width = probabilities.shape
    points = polygon.copy()
    x_min = int(np.clip(np.floor(points[:, 0].min()), 0, width - 1))
    x_max = int(np.clip(np.ceil(points[:, 0].max()), 0, width - 1))
    y_min = int(np.clip(np.floor(points[:, 1].min()), 0, height - 1))
    y_max = int(np.clip(np.ceil(points[:, 1].max()), 0, height - 1))
    mask = np.zeros((y_max - y_min + 1, x_max - x_min + 1), dtype=np.uint8)
    points[:, 0] = points[:, 0] - x_min
    points[:, 1] = points[:, 1] - y_min
    cv2.fillPoly(mask, [points.reshape(-1, 2).astype(np.int32)], (1,))
    return float(cv2.mean(probabilities[y_min : y_max + 1, x_min : x_max + 1], mask)[0])


def _unclip(corners: np.ndarray, ratio: float) -> np.ndarray:
    """The rectangle grown outwards by ``area * ratio / perimeter`` with round joins."""
    # here, not at the top: only a text detector needs shapely, and every process that may serve
    # /detect (the model process, each intake) imports this module at start
    from shapely.geometry import Polygon  # type: ignore[import-untyped]

    polygon = Polygon(corners)
    distance = polygon.area * ratio / polygon.length
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(corners, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    return np.array(offset.Execute(distance)).reshape((-1, 1, 2))


def _clockwise(quad: np.ndarray) -> np.ndarray:
    """Corners as top-left, top-right, bottom-right, bottom-left: the two left-most by x, each
    pair ordered by y (float32, as the reference)."""
    by_x = quad[np.argsort(quad[:, 0]), :]
    left, right = by_x[:2, :], by_x[2:, :]
    top_left, bottom_left = left[np.argsort(left[:, 1]), :]
    top_right, bottom_right = right[np.argsort(right[:, 1]), :]
    return np.array([top_left, top_right, bottom_right, bottom_left], dtype=np.float32)


def _clip_inside(quad: np.ndarray, width: int, height: int) -> np.ndarray:
    """Each corner truncated into the last row and column of the source."""
    clipped = quad.copy()
    clipped[:, 0] = np.trunc(np.minimum(np.maximum(clipped[:, 0], 0), width - 1))
    clipped[:, 1] = np.trunc(np.minimum(np.maximum(clipped[:, 1], 0), height - 1))
    return clipped
