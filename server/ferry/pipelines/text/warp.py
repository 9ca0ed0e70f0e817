"""OpenCV 4.10's bicubic ``warpPerspective`` (replicated border) on 8-bit images, in numpy.

The text-line crops of PaddleOCR pipelines are ``cv2.warpPerspective(..., INTER_CUBIC,
BORDER_REPLICATE)``, and OpenCV 5.0 changed that warp's pixels (every crop of the OCR references
differs). Written out here, the crops are 4.10's whichever OpenCV is installed. The steps are
OpenCV 4.10's ``imgwarp.cpp``: the matrix inverted in closed form (``cv::invert``, 3x3 doubles),
each output pixel's source position computed in doubles per block of columns and rounded to
1/32 pixel (``INTER_BITS`` 5), then the 4x4 neighbourhood weighted by the fixed-point bicubic
table (A = -0.75, weights in 1/32768, each 2-D kernel corrected to sum to exactly 32768) and
rounded back to 8 bits.
"""

from __future__ import annotations

import functools

import numpy as np

INTER_BITS = 5
TAB_SIZE = 1 << INTER_BITS
COEF_BITS = 15
COEF_SCALE = 1 << COEF_BITS
#: warpPerspective's block: 16 rows, 1024 / 16 = 64 columns (fewer where the image is smaller).
BLOCK = 32


def warp_perspective_cubic(image: np.ndarray, matrix: np.ndarray, width: int, height: int) -> np.ndarray:
    """``cv2.warpPerspective(image, matrix, (width, height), flags=INTER_CUBIC,
    borderMode=BORDER_REPLICATE)`` as OpenCV 4.10 computes it (uint8, H x W or H x W x C)."""
    if image.dtype != np.uint8:
        raise ValueError("warp_perspective_cubic takes 8-bit images")
    inverse = _invert(np.asarray(matrix, dtype=np.float64).reshape(3, 3))
    x_fixed, y_fixed = _source_positions(inverse, width, height)
    columns = (x_fixed >> INTER_BITS) - 1
    rows = (y_fixed >> INTER_BITS) - 1
    weights = _table()[(y_fixed & (TAB_SIZE - 1)) * TAB_SIZE + (x_fixed & (TAB_SIZE - 1))]  # (H, W, 4, 4)
    pixels = image if image.ndim == 3 else image[:, :, None]
    source_height, source_width = pixels.shape[:2]
    total = np.zeros((height, width, pixels.shape[2]), dtype=np.int64)
    for k1 in range(4):
        y = np.clip(rows + k1, 0, source_height - 1)
        for k2 in range(4):
            x = np.clip(columns + k2, 0, source_width - 1)
            total += pixels[y, x].astype(np.int64) * weights[:, :, k1, k2, None]
    result = np.clip((total + (1 << (COEF_BITS - 1))) >> COEF_BITS, 0, 255).astype(np.uint8)
    return result if image.ndim == 3 else result[:, :, 0]


def _invert(m: np.ndarray) -> list[float]:
    """``cv::invert`` of a 3x3 double matrix (DECOMP_LU's closed form), row-major, as Python floats
    (IEEE doubles evaluated in OpenCV's order)."""
    a = [[float(v) for v in row] for row in m]
    d = (
        a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
        - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
        + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
    )
    if d == 0.0:
        raise ValueError("the perspective matrix is singular")
    d = 1.0 / d
    return [
        (a[1][1] * a[2][2] - a[1][2] * a[2][1]) * d,
        (a[0][2] * a[2][1] - a[0][1] * a[2][2]) * d,
        (a[0][1] * a[1][2] - a[0][2] * a[1][1]) * d,
        (a[1][2] * a[2][0] - a[1][0] * a[2][2]) * d,
        (a[0][0] * a[2][2] - a[0][2] * a[2][0]) * d,
        (a[0][2] * a[1][0] - a[0][0] * a[1][2]) * d,
        (a[1][0] * a[2][1] - a[1][1] * a[2][0]) * d,
        (a[0][1] * a[2][0] - a[0][0] * a[2][1]) * d,
        (a[0][0] * a[1][1] - a[0][1] * a[1][0]) * d,
    ]


def _source_positions(m: list[float], width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Each output pixel's source position in 1/32 pixels (int64, H x W): per block of columns
    starting at ``x``, ``(M0 * x + M1 * y + M2 + M0 * x1) * 32 / W`` rounded half to even."""
    block_rows = min(BLOCK // 2, height)
    block_columns = min(BLOCK * BLOCK // block_rows, width)
    y = np.arange(height, dtype=np.float64)[:, None]
    column = np.arange(width)
    start = (column // block_columns * block_columns).astype(np.float64)[None, :]
    offset = (column % block_columns).astype(np.float64)[None, :]
    x0 = m[0] * start + m[1] * y + m[2]
    y0 = m[3] * start + m[4] * y + m[5]
    w0 = m[6] * start + m[7] * y + m[8]
    w = w0 + m[6] * offset
    with np.errstate(divide="ignore"):
        scale = np.where(w != 0, TAB_SIZE / np.where(w != 0, w, 1.0), 0.0)
    limit = (float(np.iinfo(np.int32).min), float(np.iinfo(np.int32).max))
    fx = np.clip((x0 + m[0] * offset) * scale, *limit)
    fy = np.clip((y0 + m[3] * offset) * scale, *limit)
    return np.rint(fx).astype(np.int64), np.rint(fy).astype(np.int64)


@functools.cache
def _table() -> np.ndarray:
    """OpenCV's fixed-point bicubic kernels (``initInterTab2D(INTER_CUBIC, true)``): (32 * 32,
    4, 4) int64, indexed by (y fraction * 32 + x fraction)."""
    one_d = np.zeros((TAB_SIZE, 4), dtype=np.float32)
    a = np.float32(-0.75)
    for i in range(TAB_SIZE):
        x = np.float32(i) * np.float32(1.0 / TAB_SIZE)
        x1 = x + np.float32(1)
        c0 = ((a * x1 - np.float32(5) * a) * x1 + np.float32(8) * a) * x1 - np.float32(4) * a
        c1 = ((a + np.float32(2)) * x - (a + np.float32(3))) * x * x + np.float32(1)
        r = np.float32(1) - x
        c2 = ((a + np.float32(2)) * r - (a + np.float32(3))) * r * r + np.float32(1)
        one_d[i] = (c0, c1, c2, np.float32(1) - c0 - c1 - c2)
    table = np.zeros((TAB_SIZE * TAB_SIZE, 4, 4), dtype=np.int64)
    for i in range(TAB_SIZE):
        for j in range(TAB_SIZE):
            kernel = np.rint((one_d[i][:, None] * one_d[j][None, :]) * np.float32(COEF_SCALE)).astype(np.int64)
            difference = int(kernel.sum()) - COEF_SCALE
            if difference:
                # OpenCV corrects the smallest or largest weight of rows and columns 2..3 (ksize / 2 on)
                low = high = (2, 2)
                for k1 in (2, 3):
                    for k2 in (2, 3):
                        if kernel[k1, k2] < kernel[low]:
                            low = (k1, k2)
                        elif kernel[k1, k2] > kernel[high]:
                            high = (k1, k2)
                if difference < 0:
                    kernel[high] -= difference
                else:
                    kernel[low] -= difference
            table[i * TAB_SIZE + j] = kernel
    return table
