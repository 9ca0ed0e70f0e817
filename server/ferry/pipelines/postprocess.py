"""Model outputs to results: the classification and detection post-processing in one place.

The work lives in ``classification``, ``nms`` and ``detection``; this module is the stable
import point the server uses.
"""

from __future__ import annotations

from ferry.pipelines.classification import classification_strings, softmax, top_k
from ferry.pipelines.detection import (
    DEFAULT_IOU_THRESHOLD,
    DEFAULT_MAX_DETECTIONS,
    MAX_NMS_CANDIDATES,
    Detection,
    decode_detections,
)
from ferry.pipelines.nms import nms

__all__ = [
    "DEFAULT_IOU_THRESHOLD",
    "DEFAULT_MAX_DETECTIONS",
    "MAX_NMS_CANDIDATES",
    "Detection",
    "classification_strings",
    "decode_detections",
    "nms",
    "softmax",
    "top_k",
]
