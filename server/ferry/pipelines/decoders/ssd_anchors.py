"""SSD anchor generation as MediaPipe's SsdAnchorsCalculator (itself TF Object Detection's
multiple-grid generator): anchors as relative cx, cy, w, h, layer by layer, cell by cell."""

from __future__ import annotations

import math

import numpy as np

from ferry.errors import FerryError
from ferry_client.protocol import model_config_pb2 as mc

from .base import InputSize


def _scale(minimum: float, maximum: float, index: int, count: int) -> float:
    if count == 1:
        return (minimum + maximum) / 2.0
    return minimum + (maximum - minimum) * index / (count - 1)


def _layer_shapes(options: mc.FerryDetection.SsdAnchors, first: int, last: int) -> list[tuple[float, float]]:
    """(width, height) of the anchors of one cell, for the layers first..last sharing a stride."""
    layers = int(options.num_layers)
    ratios = list(options.aspect_ratios) or [1.0]
    interpolated = options.interpolated_scale_aspect_ratio or 1.0
    scales: list[float] = []
    shape_ratios: list[float] = []
    for layer in range(first, last):
        scale = _scale(options.min_scale, options.max_scale, layer, layers)
        if layer == 0 and options.reduce_boxes_in_lowest_layer:
            shape_ratios += [1.0, 2.0, 0.5]
            scales += [0.1, scale, scale]
            continue
        shape_ratios += ratios
        scales += [scale] * len(ratios)
        if interpolated > 0:
            following = (
                1.0
                if layer == len(options.strides) - 1
                else _scale(options.min_scale, options.max_scale, layer + 1, layers)
            )
            scales.append(math.sqrt(scale * following))
            shape_ratios.append(interpolated)
    return [(s * math.sqrt(r), s / math.sqrt(r)) for s, r in zip(scales, shape_ratios, strict=True)]


def ssd_anchors(options: mc.FerryDetection.SsdAnchors, size: InputSize) -> np.ndarray:
    """(anchors, 4) relative cx, cy, w, h in the order the model's outputs list them."""
    strides = list(options.strides)
    if options.num_layers < 1 or len(strides) != options.num_layers:
        raise FerryError(
            f"ferry_image.detection.anchors: num_layers ({options.num_layers}) must be at least 1 and equal "
            f"the number of strides ({len(strides)})"
        )
    offset_x = options.anchor_offset_x or 0.5
    offset_y = options.anchor_offset_y or 0.5
    anchors = []
    layer = 0
    while layer < len(strides):
        last = layer
        while last < len(strides) and strides[last] == strides[layer]:
            last += 1
        shapes = _layer_shapes(options, layer, last)
        rows, columns = math.ceil(size.height / strides[layer]), math.ceil(size.width / strides[layer])
        for y in range(rows):
            for x in range(columns):
                for width, height in shapes:
                    if options.fixed_anchor_size:
                        width = height = 1.0
                    anchors.append(((x + offset_x) / columns, (y + offset_y) / rows, width, height))
        layer = last
    return np.asarray(anchors, dtype=np.float64)
