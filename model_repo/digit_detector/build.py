"""Train and export ``digit_detector``: a tiny anchor-free detector with a YOLOv8-style raw head.

The server's detection pipeline (letterbox preprocessing, YOLOv8 decoding,
per-class NMS, mapping boxes back to the original image) needs a real model
whose answers can be checked, but one that is small, builds offline and in a
few CPU minutes. So this detector finds the ten digit classes in synthetic
scenes built from scikit-learn's bundled ``load_digits`` images (8x8, values
0..16): nothing is downloaded and the ground truth is exact.

Model contract (see ``config.pbtxt``):

* input ``images``: FP32 ``[batch, 3, 128, 128]``, RGB, NCHW, values 0..1. The
  original image is letterboxed to 128x128 (scaled to fit keeping its aspect
  ratio, bilinear, centred, border filled with 114) and divided by 255;
  ``letterbox`` below is the reference implementation.
* output ``output0``: FP32 ``[batch, 14, 320]`` laid out like YOLOv8's raw
  output: for each of the 320 anchor points (a 16x16 grid at stride 8, then an
  8x8 grid at stride 16, row-major) a box ``cx, cy, w, h`` in input pixels
  (0..128) followed by 10 class scores already passed through a sigmoid (no
  objectness). ``decode`` below turns it into detections.

Data: ``digit_pools`` splits the 1,797 digit images per class into a training
pool and a held-out pool (fixed seed); held-out scenes use only held-out
digits, so the measured mAP is on digit images the model never saw.
``make_scene`` draws one scene; ``held_out_scenes`` rebuilds the fixed
evaluation set. This module imports torch only inside the training and export
functions (and onnx/onnxruntime only where used), so tests can import the
scene generator, ``letterbox``, ``decode`` and ``mean_average_precision``
with just numpy, scikit-learn and Pillow.

Run from the repository root (needs torch; ``pip install torch==2.13.0``)::

    python model_repo/digit_detector/build.py
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ferry.optimize.detection_map import box_iou, mean_average_precision

if TYPE_CHECKING:
    import torch

HERE = Path(__file__).resolve().parent
OPSET = 17
MAX_IR_VERSION = 9

# Model geometry and the server pipeline settings that config.pbtxt repeats.
INPUT_SIZE = 128
NUM_CLASSES = 10
STRIDES = (8, 16)
NUM_ANCHORS = sum((INPUT_SIZE // s) ** 2 for s in STRIDES)  # 16*16 + 8*8 = 320
PAD_VALUE = 114
SCORE_THRESHOLD = 0.25
IOU_THRESHOLD = 0.45
MAX_DETECTIONS = 100
MATCH_IOU = 0.5  # IoU for a true positive in mAP@0.5

# Data.
DIGIT_SPLIT_SEED = 20240611
HELD_OUT_FRACTION = 0.25  # share of each class's digit images kept for evaluation
DIGIT_SIZE_RANGE = (14, 40)  # side of a pasted digit in original-image pixels
MAX_DIGITS = 4
INK_THRESHOLD = 0.25  # a pixel belongs to the digit box when its ink value (0..1) reaches this
MAX_OVERLAP = 0.1  # max intersection / smaller box area between two digits of a scene

# Held-out evaluation set (what the server tests rebuild with held_out_scenes()).
HELD_OUT_SEED = 20240612
HELD_OUT_COUNT = 200
HELD_OUT_SIZES = ((128, 128), (160, 120), (96, 128))  # (width, height), cycled per scene
EXTRA_EVAL_SEED = 20240613  # a larger second set, only to report a steadier number
EXTRA_EVAL_COUNT = 1000

# Training.
TRAIN_SEED = 1
TORCH_SEED = 0
STEPS = 2000
BATCH_SIZE = 32
LEARNING_RATE = 2e-3
WEIGHT_DECAY = 5e-4
WARMUP_STEPS = 150
EMA_DECAY = 0.998
TRAIN_SIDE_RANGE = (96, 192)  # canvas sides of non-square training scenes
SQUARE_FRACTION = 0.4  # share of 128x128 training scenes (no resize)
LEVEL_SPLIT = 24.0  # boxes whose longer side (input pixels) exceeds this go to stride 16
BOX_LOSS_WEIGHT = 2.5
L1_LOSS_WEIGHT = 0.5
TARGET_MAP = 0.85


class DigitPool(NamedTuple):
    """Digit images a scene may use: ``images`` float32 ``[n, 8, 8]`` (0..16), ``labels`` int64 ``[n]``."""

    images: np.ndarray
    labels: np.ndarray


class Scene(NamedTuple):
    """One synthetic scene: uint8 ``[H, W, 3]`` RGB image, xyxy pixel boxes ``[K, 4]``, classes ``[K]``."""

    image: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray


class Letterbox(NamedTuple):
    """How an image was fitted into the model input, needed to map boxes back.

    ``gain_x``/``gain_y`` are new size / original size per axis (they differ
    only by the rounding of the new size); ``pad_x``/``pad_y`` are the left
    and top borders in input pixels.
    """

    gain_x: float
    gain_y: float
    pad_x: int
    pad_y: int
    width: int
    height: int


# ---------------------------------------------------------------------------
# Data (numpy, scikit-learn and Pillow only)
# ---------------------------------------------------------------------------


def digit_pools(seed: int = DIGIT_SPLIT_SEED) -> tuple[DigitPool, DigitPool]:
    """Return (training pool, held-out pool) of ``load_digits`` images.

    Split per class with a numpy permutation rather than scikit-learn's
    splitter so that it depends only on numpy's seeded generator, like the
    scenes themselves.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    train_idx: list[np.ndarray] = []
    held_idx: list[np.ndarray] = []
    for cls in range(NUM_CLASSES):
        members = rng.permutation(np.flatnonzero(labels == cls))
        n_held = int(round(len(members) * HELD_OUT_FRACTION))
        held_idx.append(members[:n_held])
        train_idx.append(members[n_held:])
    train = np.sort(np.concatenate(train_idx))
    held = np.sort(np.concatenate(held_idx))
    images = digits.images.astype(np.float32)
    return DigitPool(images[train], labels[train]), DigitPool(images[held], labels[held])


def _resize_weights(src: int, dst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (low index, high index, high weight) per output pixel for bilinear, half-pixel centres."""
    centres = (np.arange(dst, dtype=np.float64) + 0.5) * (src / dst) - 0.5
    centres = np.clip(centres, 0.0, src - 1)
    low = np.floor(centres).astype(np.int64)
    high = np.minimum(low + 1, src - 1)
    return low, high, centres - low


def _upscale(values: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Bilinearly resize a 2-D array (numpy, so scenes do not depend on an image library's resampler)."""
    lo_r, hi_r, w_r = _resize_weights(values.shape[0], out_h)
    lo_c, hi_c, w_c = _resize_weights(values.shape[1], out_w)
    rows = values[lo_r, :] * (1 - w_r)[:, None] + values[hi_r, :] * w_r[:, None]
    return rows[:, lo_c] * (1 - w_c)[None, :] + rows[:, hi_c] * w_c[None, :]


def _luma(rgb: np.ndarray) -> np.ndarray:
    """Rec. 601 luma of RGB values, used to keep digits visible against their background."""
    return rgb @ np.array([0.299, 0.587, 0.114])


def _background(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """Return a float ``[H, W, 3]`` background: a two-colour linear gradient plus low-frequency blotches."""
    start, end = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    angle = rng.uniform(0, 2 * math.pi)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    ramp = xx * math.cos(angle) + yy * math.sin(angle)
    ramp = (ramp - ramp.min()) / max(float(np.ptp(ramp)), 1e-6)
    image = start + (end - start) * ramp[..., None]
    blotches = rng.normal(0.0, rng.uniform(0, 25), (3, 4, 3))
    smooth = np.stack([_upscale(blotches[:, :, c], height, width) for c in range(3)], axis=-1)
    return image + smooth


def _overlaps(box: np.ndarray, others: list[np.ndarray]) -> bool:
    """True when ``box`` covers more than MAX_OVERLAP of itself or of any box in ``others``."""
    for other in others:
        iw = min(box[2], other[2]) - max(box[0], other[0])
        ih = min(box[3], other[3]) - max(box[1], other[1])
        if iw <= 0 or ih <= 0:
            continue
        smaller = min((box[2] - box[0]) * (box[3] - box[1]), (other[2] - other[0]) * (other[3] - other[1]))
        if iw * ih > MAX_OVERLAP * smaller:
            return True
    return False


def make_scene(rng: np.random.Generator, width: int, height: int, digit_pool: DigitPool) -> Scene:
    """Draw one scene of ``width`` x ``height`` with 1-4 digits from ``digit_pool``.

    Each digit is an 8x8 image upscaled bilinearly to 14-40 px (slightly
    stretched), alpha-blended in a random colour with enough luma contrast to
    its background, and kept only if it barely overlaps the others. Its box is
    the tight box of the pixels whose ink value reaches INK_THRESHOLD, in
    pixel-edge coordinates (x1, y1 exclusive), so it follows the visible
    stroke rather than the 8x8 frame. ``digit_pool`` may be a ``DigitPool`` or
    any ``(images, labels)`` pair.
    """
    images, labels = digit_pool
    canvas = _background(rng, width, height)
    boxes: list[np.ndarray] = []
    classes: list[int] = []
    wanted = int(rng.integers(1, MAX_DIGITS + 1))
    lo, hi = DIGIT_SIZE_RANGE
    for _ in range(wanted):
        for _attempt in range(30):
            size = rng.uniform(lo, min(hi, width, height))
            aspect = rng.uniform(0.8, 1.2)
            ph = int(round(min(size * math.sqrt(aspect), height)))
            pw = int(round(min(size / math.sqrt(aspect), width)))
            top = int(rng.integers(0, height - ph + 1))
            left = int(rng.integers(0, width - pw + 1))
            pick = int(rng.integers(0, len(labels)))
            ink = np.clip(_upscale(images[pick] / 16.0, ph, pw), 0.0, 1.0)
            rows = np.flatnonzero(ink.max(axis=1) >= INK_THRESHOLD)
            cols = np.flatnonzero(ink.max(axis=0) >= INK_THRESHOLD)
            if len(rows) == 0 or len(cols) == 0:
                continue
            box = np.array([left + cols[0], top + rows[0], left + cols[-1] + 1, top + rows[-1] + 1], np.float32)
            if _overlaps(box, boxes):
                continue
            region = canvas[top : top + ph, left : left + pw]
            bg_luma = float(_luma(region.reshape(-1, 3).mean(axis=0)))
            colour = rng.uniform(0, 255, 3)
            for _c in range(20):
                if abs(float(_luma(colour)) - bg_luma) >= 70:
                    break
                colour = rng.uniform(0, 255, 3)
            else:
                colour = np.zeros(3) if bg_luma > 127 else np.full(3, 255.0)
            alpha = (ink * rng.uniform(0.75, 1.0))[..., None]
            canvas[top : top + ph, left : left + pw] = region * (1 - alpha) + colour * alpha
            boxes.append(box)
            classes.append(int(labels[pick]))
            break
    noise = rng.normal(0.0, rng.uniform(0, 12), canvas.shape)
    image = np.clip(np.round(canvas + noise), 0, 255).astype(np.uint8)
    return Scene(
        image,
        np.array(boxes, dtype=np.float32).reshape(-1, 4),
        np.array(classes, dtype=np.int64),
    )


def held_out_scenes(count: int = HELD_OUT_COUNT, seed: int = HELD_OUT_SEED) -> list[Scene]:
    """Rebuild the evaluation scenes: held-out digits only, sizes cycling through HELD_OUT_SIZES."""
    _, pool = digit_pools()
    rng = np.random.default_rng(seed)
    scenes = []
    for i in range(count):
        width, height = HELD_OUT_SIZES[i % len(HELD_OUT_SIZES)]
        scenes.append(make_scene(rng, width, height, pool))
    return scenes


def letterbox(image: np.ndarray, size: int = INPUT_SIZE, pad_value: int = PAD_VALUE) -> tuple[np.ndarray, Letterbox]:
    """Fit a uint8 ``[H, W, 3]`` RGB image into ``[3, size, size]`` float32 (0..1) like the server does.

    Scale factor ``min(size / W, size / H)``, new size rounded to the nearest
    pixel, Pillow bilinear resize, centred with ``(size - new) // 2`` pixels
    of ``pad_value`` on the left/top, then divided by 255.
    """
    from PIL import Image

    height, width = image.shape[:2]
    gain = min(size / width, size / height)
    new_w = max(1, int(round(width * gain)))
    new_h = max(1, int(round(height * gain)))
    resized = image
    if (new_w, new_h) != (width, height):
        resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.Resampling.BILINEAR))
    pad_x, pad_y = (size - new_w) // 2, (size - new_h) // 2
    canvas = np.full((size, size, 3), pad_value, dtype=np.uint8)
    canvas[pad_y : pad_y + new_h, pad_x : pad_x + new_w] = resized
    tensor = canvas.transpose(2, 0, 1).astype(np.float32) / 255.0
    return tensor, Letterbox(new_w / width, new_h / height, pad_x, pad_y, width, height)


def boxes_to_input(boxes: np.ndarray, info: Letterbox) -> np.ndarray:
    """Map xyxy boxes from original-image pixels to model-input pixels."""
    out = np.asarray(boxes, dtype=np.float32).copy()
    out[:, [0, 2]] = out[:, [0, 2]] * info.gain_x + info.pad_x
    out[:, [1, 3]] = out[:, [1, 3]] * info.gain_y + info.pad_y
    return out


def boxes_to_original(boxes: np.ndarray, info: Letterbox) -> np.ndarray:
    """Map xyxy boxes from model-input pixels back to original-image pixels, clipped to the image."""
    out = np.asarray(boxes, dtype=np.float32).copy()
    out[:, [0, 2]] = np.clip((out[:, [0, 2]] - info.pad_x) / info.gain_x, 0, info.width)
    out[:, [1, 3]] = np.clip((out[:, [1, 3]] - info.pad_y) / info.gain_y, 0, info.height)
    return out


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float = IOU_THRESHOLD) -> np.ndarray:
    """Greedy non-maximum suppression; returns kept indices, best score first."""
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while len(order):
        best = int(order[0])
        keep.append(best)
        rest = order[1:]
        order = rest[box_iou(boxes[best : best + 1], boxes[rest])[0] <= iou_threshold]
    return np.array(keep, dtype=np.int64)


def decode(
    output: np.ndarray,
    info: Letterbox | None = None,
    score_threshold: float = SCORE_THRESHOLD,
    iou_threshold: float = IOU_THRESHOLD,
    max_detections: int = MAX_DETECTIONS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Turn one image's raw ``[14, 320]`` output into (xyxy boxes, scores, classes), best first.

    Each anchor proposes only its best class (as YOLOv8's default
    post-processing does); proposals above ``score_threshold`` go through
    per-class NMS, the best ``max_detections`` are kept and, when ``info`` is
    given, mapped back to original-image pixels.
    """
    output = np.asarray(output, dtype=np.float32)
    class_scores = output[4:].T
    classes = class_scores.argmax(axis=1)
    scores = class_scores[np.arange(len(classes)), classes]
    mask = scores > score_threshold
    cx, cy, w, h = output[:4, mask]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    scores, classes = scores[mask], classes[mask]
    kept = [
        np.flatnonzero(classes == c)[nms(boxes[classes == c], scores[classes == c], iou_threshold)]
        for c in np.unique(classes)
    ]
    keep = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
    keep = keep[np.argsort(-scores[keep], kind="stable")][:max_detections]
    boxes, scores, classes = boxes[keep], scores[keep], classes[keep].astype(np.int64)
    if info is not None:
        boxes = boxes_to_original(boxes, info)
    return boxes.astype(np.float32), scores.astype(np.float32), classes


def anchor_points() -> tuple[np.ndarray, np.ndarray]:
    """Return anchor centres ``[A, 2]`` (x, y in input pixels) and strides ``[A]``, in output order."""
    points, strides = [], []
    for stride in STRIDES:
        n = INPUT_SIZE // stride
        ys, xs = np.mgrid[0:n, 0:n]
        centres = (np.stack([xs.ravel(), ys.ravel()], axis=1) + 0.5) * stride
        points.append(centres)
        strides.append(np.full(n * n, stride))
    return np.concatenate(points).astype(np.float32), np.concatenate(strides).astype(np.float32)


# ---------------------------------------------------------------------------
# Training data and targets
# ---------------------------------------------------------------------------


def training_batch(
    rng: np.random.Generator, pool: DigitPool, batch_size: int
) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Draw fresh letterboxed scenes: (inputs ``[B, 3, 128, 128]``, input-pixel boxes, classes).

    Every batch is new, so the model never sees the same scene twice; it
    mixes 128x128 canvases with random non-square ones (sides 96-192) that
    go through the same ``letterbox`` as at inference.
    """
    inputs = np.empty((batch_size, 3, INPUT_SIZE, INPUT_SIZE), dtype=np.float32)
    all_boxes, all_classes = [], []
    lo, hi = TRAIN_SIDE_RANGE
    for i in range(batch_size):
        if rng.random() < SQUARE_FRACTION:
            width = height = INPUT_SIZE
        else:
            width, height = (int(v) for v in rng.integers(lo, hi + 1, 2))
        scene = make_scene(rng, width, height, pool)
        inputs[i], info = letterbox(scene.image)
        all_boxes.append(boxes_to_input(scene.boxes, info))
        all_classes.append(scene.classes)
    return inputs, all_boxes, all_classes


def assign_targets(boxes: list[np.ndarray], classes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (positive mask ``[B, A]``, class targets ``[B, A, 10]``, box targets ``[B, A, 4]`` xyxy).

    A box belongs to stride 8 when its longer side is at most LEVEL_SPLIT
    input pixels, else to stride 16; on that level, the anchors closer than
    one stride to its centre in both x and y (the 2x2 nearest, always
    including the cell holding the centre) are positives. Larger boxes are
    assigned first, so a smaller box wins a shared anchor.
    """
    points, strides = anchor_points()
    batch = len(boxes)
    positive = np.zeros((batch, NUM_ANCHORS), dtype=bool)
    cls_target = np.zeros((batch, NUM_ANCHORS, NUM_CLASSES), dtype=np.float32)
    box_target = np.zeros((batch, NUM_ANCHORS, 4), dtype=np.float32)
    for b in range(batch):
        bx, cl = boxes[b], classes[b]
        areas = (bx[:, 2] - bx[:, 0]) * (bx[:, 3] - bx[:, 1])
        for k in np.argsort(-areas, kind="stable"):
            x0, y0, x1, y1 = bx[k]
            stride = STRIDES[0] if max(x1 - x0, y1 - y0) <= LEVEL_SPLIT else STRIDES[1]
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            near = (strides == stride) & (np.abs(points[:, 0] - cx) < stride) & (np.abs(points[:, 1] - cy) < stride)
            positive[b, near] = True
            cls_target[b, near] = 0.0
            cls_target[b, near, cl[k]] = 1.0
            box_target[b, near] = bx[k]
    return positive, cls_target, box_target


# ---------------------------------------------------------------------------
# Model, training and export (torch imported inside)
# ---------------------------------------------------------------------------


def build_network() -> torch.nn.Module:
    """Return the detector: small strided CNN, two-level FPN/PAN neck, decoupled YOLOv8-like heads."""
    import torch
    from torch import nn

    def conv(cin: int, cout: int, stride: int = 1, kernel: int = 3) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU()
        )

    class Head(nn.Module):
        """Separate box and class branches, as in YOLOv8, so the two tasks do not fight over features."""

        def __init__(self, channels: int, hidden: int) -> None:
            super().__init__()
            self.box = nn.Sequential(conv(channels, hidden), conv(hidden, hidden), nn.Conv2d(hidden, 4, 1))
            self.cls = nn.Sequential(conv(channels, hidden), conv(hidden, hidden), nn.Conv2d(hidden, NUM_CLASSES, 1))
            # Start with ~1% class probability so the many background anchors do not swamp early training.
            nn.init.constant_(self.cls[-1].bias, -math.log(99.0))
            nn.init.zeros_(self.box[-1].weight)
            nn.init.zeros_(self.box[-1].bias)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.box(x).flatten(2), self.cls(x).flatten(2)

    class Detector(nn.Module):
        """Anchor-free detector emitting decoded boxes (input pixels) and class logits per anchor."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(conv(3, 16, 2), conv(16, 32, 2), conv(32, 32))  # 32 x 32 x 32
            self.stage3 = nn.Sequential(conv(32, 64, 2), conv(64, 64))  # 64 x 16 x 16 (stride 8)
            self.stage4 = nn.Sequential(conv(64, 96, 2), conv(96, 96))  # 96 x 8 x 8 (stride 16)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.fuse3 = nn.Sequential(conv(64 + 96, 64, kernel=1), conv(64, 64))
            self.down = conv(64, 64, 2)
            self.fuse4 = nn.Sequential(conv(64 + 96, 96, kernel=1), conv(96, 96))
            self.head3 = Head(64, 48)
            self.head4 = Head(96, 64)
            points, strides = anchor_points()
            self.register_buffer("points", torch.from_numpy(points.T.copy())[None])  # [1, 2, A]
            self.register_buffer("strides", torch.from_numpy(strides)[None, None])  # [1, 1, A]

        def raw(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """Return boxes ``[N, 4, A]`` (cx, cy, w, h in input pixels) and class logits ``[N, 10, A]``."""
            c3 = self.stage3(self.stem(x))
            c4 = self.stage4(c3)
            p3 = self.fuse3(torch.cat([c3, self.up(c4)], 1))
            p4 = self.fuse4(torch.cat([self.down(p3), c4], 1))
            box3, cls3 = self.head3(p3)
            box4, cls4 = self.head4(p4)
            box = torch.cat([box3, box4], 2)
            logits = torch.cat([cls3, cls4], 2)
            centre = self.points + box[:, :2] * self.strides
            size = torch.exp(box[:, 2:].clamp(-6.0, 6.0)) * self.strides
            return torch.cat([centre, size], 1), logits

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            """The exported output: ``[N, 4 + 10, A]`` with sigmoid class scores (YOLOv8 layout)."""
            boxes, logits = self.raw(x)
            return torch.cat([boxes, torch.sigmoid(logits)], 1)

    return Detector()


def _giou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Generalised IoU of matching xyxy box rows; a smooth box loss that also moves non-overlapping boxes."""
    import torch

    iw = (torch.minimum(a[:, 2], b[:, 2]) - torch.maximum(a[:, 0], b[:, 0])).clamp(min=0)
    ih = (torch.minimum(a[:, 3], b[:, 3]) - torch.maximum(a[:, 1], b[:, 1])).clamp(min=0)
    inter = iw * ih
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a + area_b - inter + 1e-7
    hull = (torch.maximum(a[:, 2], b[:, 2]) - torch.minimum(a[:, 0], b[:, 0])) * (
        torch.maximum(a[:, 3], b[:, 3]) - torch.minimum(a[:, 1], b[:, 1])
    ) + 1e-7
    return inter / union - (hull - union) / hull


def train(pool: DigitPool, steps: int = STEPS) -> torch.nn.Module:
    """Train on freshly drawn scenes and return the exponential moving average of the weights, in eval mode.

    Loss per batch: BCE on all anchors' class logits (one-hot targets at
    positives, zeros elsewhere) summed and divided by the number of
    positives, plus GIoU and stride-normalised L1 box losses on positives.
    AdamW with linear warm-up and cosine decay; the EMA copy is what gets
    exported because it is steadier than the last step's weights.
    """
    import copy

    import torch
    from torch.nn import functional as F

    torch.manual_seed(TORCH_SEED)
    rng = np.random.default_rng(TRAIN_SEED)
    model = build_network()
    ema = copy.deepcopy(model).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    optimiser = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LEARNING_RATE,
    )

    def lr_at(step: int) -> float:
        if step < WARMUP_STEPS:
            return LEARNING_RATE * (step + 1) / WARMUP_STEPS
        progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
        return LEARNING_RATE * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))

    _, anchor_strides = anchor_points()
    strides_t = torch.from_numpy(anchor_strides)
    started = time.process_time()
    running = np.zeros(3)
    for step in range(steps):
        model.train()
        inputs, boxes, classes = training_batch(rng, pool, BATCH_SIZE)
        positive, cls_target, box_target = assign_targets(boxes, classes)
        pos = torch.from_numpy(positive)
        n_pos = max(int(positive.sum()), 1)
        pred_boxes, logits = model.raw(torch.from_numpy(inputs))
        cls_loss = (
            F.binary_cross_entropy_with_logits(logits.transpose(1, 2), torch.from_numpy(cls_target), reduction="sum")
            / n_pos
        )
        cxcywh = pred_boxes.transpose(1, 2)[pos]
        xyxy = torch.cat([cxcywh[:, :2] - cxcywh[:, 2:] / 2, cxcywh[:, :2] + cxcywh[:, 2:] / 2], 1)
        target = torch.from_numpy(box_target)[pos]
        giou_loss = (1.0 - _giou(xyxy, target)).mean()
        scale = strides_t[None].expand(len(positive), -1)[pos][:, None]
        l1_loss = (torch.abs(xyxy - target) / scale).mean()
        loss = cls_loss + BOX_LOSS_WEIGHT * giou_loss + L1_LOSS_WEIGHT * l1_loss
        for group in optimiser.param_groups:
            group["lr"] = lr_at(step)
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimiser.step()
        with torch.no_grad():
            d = min(EMA_DECAY, (1 + step) / (10 + step))  # short memory at the start
            for e, m in zip(ema.parameters(), model.parameters(), strict=True):
                e.mul_(d).add_(m.detach(), alpha=1 - d)
            for e, m in zip(ema.buffers(), model.buffers(), strict=True):
                e.copy_(m)
        running += [cls_loss.item(), giou_loss.item(), l1_loss.item()]
        if (step + 1) % 250 == 0 or step + 1 == steps:
            n = (step % 250) + 1
            cls_l, giou_l, l1_l = running / n
            print(
                f"step {step + 1:5d}: cls {cls_l:.4f} giou {giou_l:.4f} l1 {l1_l:.4f} "
                f"lr {lr_at(step):.2e} cpu {time.process_time() - started:.0f}s",
                flush=True,
            )
            running[:] = 0
    return ema


def export(model: torch.nn.Module, path: Path) -> None:
    """Export to ONNX (opset 17, dynamic batch axis), cap the IR version and check the graph."""
    import torch

    dummy = torch.zeros(1, 3, INPUT_SIZE, INPUT_SIZE)
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated upstream but still works for this graph.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (dummy,),
            str(path),
            dynamo=False,  # needs no onnxscript; folds BatchNorm into the convolutions
            input_names=["images"],
            output_names=["output0"],
            dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
        )
    finalise_onnx(path)


def finalise_onnx(path: Path) -> None:
    """Pin ``output0`` to ``[batch, 14, 320]``, cap the IR version and check the graph (strict shapes).

    The TorchScript exporter leaves the channel axis of the final Concat as a
    symbolic dimension once the batch axis is dynamic; a config checker (and
    the server) comparing against ``dims: [14, 320]`` needs it concrete. The
    full checker's strict shape inference confirms the pinned sizes.
    """
    import onnx

    proto = onnx.load(str(path))
    if proto.ir_version > MAX_IR_VERSION:
        proto.ir_version = MAX_IR_VERSION
    proto.producer_name = "ferry-model-repo (torch.onnx.export)"
    (output,) = proto.graph.output
    dims = output.type.tensor_type.shape.dim
    for dim, size in zip(dims[1:], (4 + NUM_CLASSES, NUM_ANCHORS), strict=True):
        dim.ClearField("dim_param")
        dim.dim_value = size
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))


# ---------------------------------------------------------------------------
# Evaluation through onnxruntime
# ---------------------------------------------------------------------------


def run_onnx(model_path: Path, scenes: list[Scene], batch_size: int = 16) -> list[np.ndarray]:
    """Letterbox each scene, run the ONNX model in batches and return one raw ``[14, 320]`` output per scene."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    inputs = np.stack([letterbox(s.image)[0] for s in scenes])
    outputs = []
    for start in range(0, len(inputs), batch_size):
        (out,) = session.run(["output0"], {"images": inputs[start : start + batch_size]})
        outputs.extend(out)
    return outputs


def evaluate(model_path: Path, scenes: list[Scene]) -> tuple[float, np.ndarray, dict[tuple[int, int], float]]:
    """Return (mAP@0.5, per-class AP, mAP per canvas size) of the ONNX model on ``scenes``.

    Uses the server's pipeline settings: score threshold 0.25, per-class NMS
    at IoU 0.45, at most 100 detections, boxes mapped back to the original
    image before matching.
    """
    outputs = run_onnx(model_path, scenes)
    detections = [decode(out, letterbox(s.image)[1]) for out, s in zip(outputs, scenes, strict=True)]
    truth = [(s.boxes, s.classes) for s in scenes]
    overall, per_class = mean_average_precision(detections, truth, MATCH_IOU, NUM_CLASSES)
    by_size: dict[tuple[int, int], float] = {}
    for size in sorted({(s.image.shape[1], s.image.shape[0]) for s in scenes}):
        idx = [i for i, s in enumerate(scenes) if (s.image.shape[1], s.image.shape[0]) == size]
        by_size[size] = mean_average_precision(
            [detections[i] for i in idx], [truth[i] for i in idx], MATCH_IOU, NUM_CLASSES
        )[0]
    return overall, per_class, by_size


def write_readme(results: dict[str, str]) -> None:
    """Write README.md with the contract, the data recipe and the numbers this run measured."""
    sizes = ", ".join(f"{w}x{h}" for w, h in HELD_OUT_SIZES)
    text = f"""# digit_detector

Tiny anchor-free object detector with a YOLOv8-style raw output, finding the
digits 0-9 in synthetic scenes built from scikit-learn's bundled `load_digits`
images. It exists to exercise Ferry's detection pipeline (letterbox
preprocessing, YOLOv8 decoding, per-class NMS, boxes mapped back to the
original image) end to end with a model whose answers can be checked. Built by
`build.py` in this directory.

## Contract

| tensor | datatype | shape | meaning |
|---|---|---|---|
| `images` | FP32 | `[batch, 3, 128, 128]` | RGB, NCHW, 0..1: letterboxed original image / 255 |
| `output0` | FP32 | `[batch, 14, 320]` | per anchor: `cx, cy, w, h` in input pixels (0..128), then 10 sigmoid \
class scores (labels in `labels.txt`, "0".."9"); no objectness |

Anchors: a 16x16 grid at stride 8 (anchors 0-255) then an 8x8 grid at stride 16
(256-319), row-major, centres at `(i + 0.5) * stride`.

`max_batch_size: 16`, dynamic batching (`max_queue_delay_microseconds: 1000`), one
CPU instance. `ferry_image` in `config.pbtxt` asks the server to letterbox (centred,
bilinear, pad 114, scale 1/255, RGB, NCHW) and to decode as YOLOV8 with score
threshold {SCORE_THRESHOLD}, per-class NMS IoU {IOU_THRESHOLD}, at most {MAX_DETECTIONS} detections.

Reference letterbox (`build.letterbox`): gain `min(128 / W, 128 / H)`, new size
`round(W * gain) x round(H * gain)`, Pillow bilinear resize, `(128 - new) // 2`
pixels of 114 on the left/top (the rest right/bottom). Boxes map back with
`x = (x' - pad_x) * W / new_w` (same for y), clipped to the image.

## Architecture

Conv-BN-SiLU blocks: stem 3->16 (s2), 16->32 (s2), 32->32; stage 32->64 (s2), 64->64
(stride 8, 16x16); stage 64->96 (s2), 96->96 (stride 16, 8x8). Neck: stride-16
features upsampled and fused into stride 8 (1x1 + 3x3 to 64 channels), then brought back
down (3x3 s2) and fused into stride 16 (96 channels). Decoupled heads per level (two 3x3
convs then a 1x1, separately for the 4 box values and the 10 class logits). Box decoding
inside the graph: `cx = anchor_x + t_x * stride`, `w = exp(clip(t_w, -6, 6)) * stride`
(same for y/h); class scores through a sigmoid. {results["params"]} parameters.

## Data

- Digits: `sklearn.datasets.load_digits()` (1,797 images, 8x8, 0..16), split per class by
  `digit_pools()`: a seeded numpy permutation (seed {DIGIT_SPLIT_SEED}) holds out
  {HELD_OUT_FRACTION:.0%} of each class ({results["n_held"]} held-out, {results["n_train"]}
  training images). Held-out digit images only appear in held-out scenes.
- Scenes (`make_scene(rng, width, height, digit_pool)`): two-colour linear gradient
  background plus smooth colour blotches and Gaussian noise; 1-{MAX_DIGITS} digits, each
  upscaled bilinearly to {DIGIT_SIZE_RANGE[0]}-{DIGIT_SIZE_RANGE[1]} px (aspect 0.8-1.2),
  blended in a random colour with a luma contrast of at least 70 to its background, with at
  most {MAX_OVERLAP:.0%} overlap (of the smaller box) with other digits. Ground-truth boxes are
  the tight boxes of pixels whose ink value is >= {INK_THRESHOLD} (xyxy, pixel edges, in
  original-image pixels).
- Training: fresh scenes every batch ({STEPS} steps x {BATCH_SIZE} = {STEPS * BATCH_SIZE:,} scenes,
  seed {TRAIN_SEED}); {SQUARE_FRACTION:.0%} are 128x128, the rest have random sides
  {TRAIN_SIDE_RANGE[0]}-{TRAIN_SIDE_RANGE[1]} px and go through the same letterbox as inference.
- Assignment: a box goes to stride 8 when its longer side (input pixels) is at most
  {LEVEL_SPLIT:g}, else to stride 16; the anchors of that level within one stride of its centre
  in x and y (2x2) are positives. Loss: BCE on all class logits (divided by the number of
  positives) + {BOX_LOSS_WEIGHT} x GIoU loss + {L1_LOSS_WEIGHT} x stride-normalised L1 on positives.
  AdamW (lr {LEARNING_RATE}, weight decay {WEIGHT_DECAY}, {WARMUP_STEPS} warm-up steps, cosine), EMA of
  the weights (decay {EMA_DECAY}) exported. Torch single-threaded, seeds fixed.

## Held-out evaluation

`held_out_scenes(count={HELD_OUT_COUNT}, seed={HELD_OUT_SEED})`: scene `i` has size
`HELD_OUT_SIZES[i % 3]` with `HELD_OUT_SIZES = ({sizes})` (width x height), drawn
in order from `numpy.random.default_rng({HELD_OUT_SEED})` with the held-out digit pool.
These scenes hold {results["n_boxes"]} digits.

Metric: each scene letterboxed with `letterbox`, run through onnxruntime, decoded with
`decode` (best class per anchor, score > {SCORE_THRESHOLD}, per-class NMS at IoU
{IOU_THRESHOLD}, max {MAX_DETECTIONS}, boxes mapped back to the original image), then
`mean_average_precision`: VOC all-point interpolated AP at IoU {MATCH_IOU} per class,
averaged over the 10 classes.

## Results

- **mAP@0.5 = {results["map"]}** on the {HELD_OUT_COUNT} held-out scenes, through
  onnxruntime {results["ort_version"]} (CPU) on `1/model.onnx`. Per canvas size:
  {results["by_size"]}.
- Per-class AP ("0".."9"): {results["per_class"]}.
- Steadier estimate on {EXTRA_EVAL_COUNT} more held-out scenes (`held_out_scenes({EXTRA_EVAL_COUNT},
  seed={EXTRA_EVAL_SEED})`): mAP@0.5 = {results["map_extra"]}.
- Max abs difference between torch and onnxruntime outputs on the held-out inputs:
  {results["max_abs_diff"]}.
- Training: {results["train_cpu"]} of CPU time (single thread).
- ONNX: opset {OPSET}, IR version {results["ir_version"]}, {results["size"]} bytes.

Produced with torch {results["torch_version"]}, onnx {results["onnx_version"]}, numpy
{np.__version__}, Pillow {results["pil_version"]}, scikit-learn {results["sklearn_version"]},
Python {results["python"]}, by running from the repository root:

```
python model_repo/digit_detector/build.py
```

The scenes depend only on numpy's seeded generator (and Pillow's bilinear resize for
letterboxing), so the evaluation set is reproducible without torch. Retraining on the
same software stack normally gives the same weights; floating point results of
training may differ slightly across CPUs or library versions.
"""
    (HERE / "README.md").write_text(text, encoding="utf-8")


def main() -> None:
    """Train, export, evaluate through onnxruntime and record the numbers in README.md."""
    import onnx
    import onnxruntime as ort
    import PIL
    import sklearn
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    started = time.process_time()

    train_pool, held_pool = digit_pools()
    model = train(train_pool)
    train_cpu = time.process_time() - started

    path = HERE / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    export(model, path)
    (HERE / "labels.txt").write_text("".join(f"{i}\n" for i in range(NUM_CLASSES)), encoding="utf-8")

    scenes = held_out_scenes()
    inputs = np.stack([letterbox(s.image)[0] for s in scenes])
    with torch.no_grad():
        torch_out = model(torch.from_numpy(inputs)).numpy()
    ort_out = np.stack(run_onnx(path, scenes))
    max_abs_diff = float(np.abs(torch_out - ort_out).max())
    assert ort_out.shape == (len(scenes), 4 + NUM_CLASSES, NUM_ANCHORS), ort_out.shape
    assert max_abs_diff < 1e-3, max_abs_diff

    overall, per_class, by_size = evaluate(path, scenes)
    extra, _, _ = evaluate(path, held_out_scenes(EXTRA_EVAL_COUNT, EXTRA_EVAL_SEED))
    proto = onnx.load(str(path))
    results = {
        "params": f"{sum(p.numel() for p in model.parameters()):,}",
        "n_train": str(len(train_pool.labels)),
        "n_held": str(len(held_pool.labels)),
        "n_boxes": str(sum(len(s.classes) for s in scenes)),
        "map": f"{overall:.4f}",
        "by_size": ", ".join(f"{w}x{h}: {v:.4f}" for (w, h), v in by_size.items()),
        "per_class": ", ".join(f"{v:.3f}" for v in per_class),
        "map_extra": f"{extra:.4f}",
        "max_abs_diff": f"{max_abs_diff:.2e}",
        "train_cpu": f"{train_cpu / 60:.1f} min",
        "ir_version": str(proto.ir_version),
        "size": f"{path.stat().st_size:,}",
        "ort_version": ort.__version__,
        "torch_version": torch.__version__,
        "onnx_version": onnx.__version__,
        "pil_version": PIL.__version__,
        "sklearn_version": sklearn.__version__,
        "python": sys.version.split()[0],
    }
    write_readme(results)
    print(
        f"mAP@0.5 (onnxruntime, {HELD_OUT_COUNT} held-out scenes): {results['map']} [{results['by_size']}]; "
        f"{EXTRA_EVAL_COUNT} more scenes: {results['map_extra']}; torch vs ort max abs diff "
        f"{results['max_abs_diff']}; wrote {path} ({results['size']} bytes); training CPU {results['train_cpu']}"
    )
    if overall < TARGET_MAP:
        raise SystemExit(f"held-out mAP@0.5 {overall:.4f} is below the {TARGET_MAP} target")


if __name__ == "__main__":
    main()
