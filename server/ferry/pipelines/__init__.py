"""Server-side image pipelines (``ferry_image`` in a model config).

Clients send encoded images instead of tensors: ``decode`` turns bytes into an upright RGB image,
``preprocess`` turns it into the model input's tensor (remembering the geometry), and
``postprocess`` turns raw outputs into ranked classes or detections in the caller's pixels.
"""

from __future__ import annotations

from ferry.pipelines.decode import ALPHA_BACKGROUND, SUPPORTED_FORMATS, decode_image
from ferry.pipelines.postprocess import (
    DEFAULT_IOU_THRESHOLD,
    DEFAULT_MAX_DETECTIONS,
    Detection,
    classification_strings,
    decode_detections,
    nms,
    softmax,
    top_k,
)
from ferry.pipelines.preprocess import ImageTransform, PreprocessSpec, preprocess

__all__ = [
    "ALPHA_BACKGROUND",
    "DEFAULT_IOU_THRESHOLD",
    "DEFAULT_MAX_DETECTIONS",
    "SUPPORTED_FORMATS",
    "Detection",
    "ImageTransform",
    "PreprocessSpec",
    "classification_strings",
    "decode_detections",
    "decode_image",
    "nms",
    "preprocess",
    "softmax",
    "top_k",
]
