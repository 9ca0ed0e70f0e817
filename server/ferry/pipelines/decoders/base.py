"""The one interface every detector family implements: raw outputs in, candidate boxes out.

A decoder is built once per model version with the model input's size, checks the declared
output shapes at load (so a model configured with the wrong family never serves garbage boxes),
and turns each batch's raw tensors into per-image candidates in model-input pixels. Thresholds,
suppression and the mapping back to the caller's pixels are shared (``detection.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ferry.errors import FerryError
from ferry_client.protocol import model_config_pb2 as mc

from ..geometry import ImageTransform

_DET = mc.FerryDetection

#: A dimension the config leaves open (-1), or one the decoder accepts at any size (None).
ANY = None


@dataclass(frozen=True)
class Candidates:
    """One image's candidate detections in model-input pixels, before thresholds and NMS."""

    boxes: np.ndarray  # (A, 4) x1, y1, x2, y2
    scores: np.ndarray  # (A,)
    classes: np.ndarray  # (A,) class ids (integer, or float ids from a model)
    keypoints: np.ndarray | None = None  # (A, K, 2) x, y


@dataclass(frozen=True)
class InputSize:
    """The model input's spatial size (pixels), which grid and anchor decoders are laid out on."""

    width: int
    height: int


class Decoder(ABC):
    """One detector family. Subclasses set ``name``, ``outputs`` (what each output read holds) and
    implement ``expected_shapes`` and ``decode``."""

    #: The format's name in messages (the ``DetectionFormat`` value).
    name: str = ""
    #: What each output read holds, in order (used in messages).
    outputs: tuple[str, ...] = ()
    #: Suppression used when the config leaves it at SUPPRESSION_DEFAULT.
    default_suppression: int = _DET.GREEDY_NMS
    #: Whether the family's reference clips boxes to the image (``clip_boxes: CLIP_DEFAULT``).
    clips_boxes: bool = True
    #: Whether detections are quadrilaterals mapped back by the decoder itself (``regions``).
    polygons: bool = False
    #: Detections kept when the config leaves ``max_detections`` at zero (None: the server's default).
    default_max_detections: int | None = None

    def __init__(self, spec: mc.FerryDetection, size: InputSize) -> None:
        self.spec = spec
        self.size = size

    def require_fixed_size(self) -> None:
        """Grid and anchor families lay their cells out on the input: refuse a dynamic one."""
        if self.size.width <= 0 or self.size.height <= 0:
            raise FerryError(f"ferry_image.detection: format {self.name} needs a model input of fixed height and width")

    @abstractmethod
    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        """The shape each output must have (batch first, ``ANY`` for free dimensions), derived from
        the config and, where a size depends on another output (classes), from ``shapes``."""

    @abstractmethod
    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        """Candidates for each image of the batch; ``tensors`` already passed ``check``.

        ``score_threshold`` is the resolved threshold; decoders may drop what scores below it
        (``multi_label`` keeps every class at or above it), the caller applies it again."""

    def regions(
        self, probability_map: np.ndarray, transform: ImageTransform, box_threshold: float | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Quadrilateral families (``polygons``): one image's corners ((N, 4, 2), original pixels)
        and scores."""
        raise FerryError(f"ferry_image.detection: format {self.name} gives boxes, not quadrilaterals")

    def check(self, shapes: Sequence[tuple[int, ...]], names: Sequence[str]) -> None:
        """Raise ``FerryError`` naming the first output whose shape does not fit this family.

        ``shapes`` include the batch dimension; -1 (declared dynamic) matches anything.
        """
        if len(names) < len(self.outputs):
            raise FerryError(
                f"ferry_image.detection: format {self.name} reads {len(self.outputs)} output(s) "
                f"({', '.join(self.outputs)}), only {len(names)} named"
            )
        for shape, want, name, role in zip(shapes, self.expected_shapes(shapes), names, self.outputs, strict=False):
            if len(shape) != len(want) or any(
                w is not None and s != -1 and s != w for s, w in zip(shape, want, strict=True)
            ):
                wanted = "[" + ", ".join("*" if w is None else str(w) for w in want) + "]"
                raise FerryError(
                    f"ferry_image.detection: format {self.name} needs output '{name}' ({role}) of shape "
                    f"{wanted}, the model's is {list(shape)}"
                )


def class_choice(class_scores: np.ndarray, multi_label: bool, threshold: float) -> tuple[np.ndarray, ...]:
    """(rows, scores, classes) of the (anchor, class) pairs kept from an (A, C) score matrix: the
    best class per anchor, or with ``multi_label`` every class at or above ``threshold``."""
    if multi_label:
        rows, classes = np.nonzero(class_scores >= threshold)
        return rows, class_scores[rows, classes], classes
    classes = class_scores.argmax(axis=1)
    rows = np.arange(class_scores.shape[0])
    return rows, class_scores[rows, classes], classes


def activate(scores: np.ndarray, activation: int) -> np.ndarray:
    """Raw class scores to probabilities (the last axis is the class axis)."""
    values = scores.astype(np.float32, copy=False)
    if activation == _DET.SIGMOID:
        # Clipped as MediaPipe's score_clipping_thresh; in float64 so exp(100) does not overflow.
        return (1.0 / (1.0 + np.exp(-np.clip(values.astype(np.float64), -100.0, 100.0)))).astype(np.float32)
    if activation == _DET.SOFTMAX:
        shifted = np.exp(values - values.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    return values


def centre_to_corners(boxes: np.ndarray) -> np.ndarray:
    """(…, 4) cx, cy, w, h to x1, y1, x2, y2."""
    half = boxes[..., 2:4] / 2.0
    return np.concatenate([boxes[..., 0:2] - half, boxes[..., 0:2] + half], axis=-1)


def grid_cells(size: InputSize, strides: Sequence[int]) -> list[tuple[int, int]]:
    """(rows, columns) of each level's grid: the input size divided by the stride, rounded up."""
    return [(-(-size.height // s), -(-size.width // s)) for s in strides]


def grid_points(rows: int, columns: int) -> np.ndarray:
    """(rows * columns, 2) integer x, y of each cell, row-major (as every grid head flattens)."""
    ys, xs = np.meshgrid(np.arange(rows), np.arange(columns), indexing="ij")
    return np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.float64)
