"""DBNet text detection (PP-OCR's detectors): a probability map to quadrilaterals.

Unlike the box families, the reference rounds and clips the corners in the *original* image's
pixels, so this decoder maps back itself (``regions``) with ``text.db.text_quads``, the function
the OCR model kind uses; each detection is a quadrilateral (``polygon``) and its bounding box.
PaddleOCR applies no NMS; the box threshold is ``score_threshold`` (zero: 0.5). The detections
come in ``dbnet.reading_order``: as the contours were found (1.4.4's ``TextDetector``, the
default), or sorted as one of the references sorts them (``text.reading``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry.errors import FerryError
from ferry_client.protocol import model_config_pb2 as mc

from ..geometry import ImageTransform
from ..text.db import DbOptions, text_quads
from ..text.reading import ReadingOrder, reading_order
from .base import ANY, Candidates, Decoder, InputSize

_DET = mc.FerryDetection
_DB = _DET.DbNet
#: PaddleOCR's ``box_thresh`` (rapidocr_onnxruntime 1.4.4's default).
DEFAULT_BOX_THRESHOLD = 0.5
_DEFAULTS = DbOptions()
#: ``DbNet.ReadingOrder`` -> the sort of ``text.reading``.
_ORDERS = {
    _DB.CONTOUR_ORDER: ReadingOrder.CONTOUR_ORDER,
    _DB.NEIGHBOUR_SWAP: ReadingOrder.NEIGHBOUR_SWAP,
    _DB.LINE_GROUPS: ReadingOrder.LINE_GROUPS,
}
#: Box-family fields with no meaning for a segmentation map: refused at load.
_REFUSED = (
    "box_format",
    "strides",
    "num_keypoints",
    "score_activation",
    "top_k_per_level",
    "multi_label",
    "class_agnostic_nms",
    "iou_threshold",
    "nms_plus_one_area",
)


class DbNetDecoder(Decoder):
    name = "DBNET"
    outputs = ("probability map",)
    default_suppression = _DET.NO_NMS
    polygons = True

    def __init__(self, spec: mc.FerryDetection, size: InputSize) -> None:
        super().__init__(spec, size)
        refused = [field for field in _REFUSED if getattr(spec, field)]
        refused += [field for field in ("anchors", "box_coder") if spec.HasField(field)]
        if spec.suppression not in (_DET.SUPPRESSION_DEFAULT, _DET.NO_NMS):
            refused.append("suppression")
        if spec.clip_boxes == _DET.NO_CLIP:
            refused.append("clip_boxes: NO_CLIP")
        if refused:
            raise FerryError(
                f"ferry_image.detection: format DBNET does not use {', '.join(refused)} (PaddleOCR's DBPostProcess "
                "has no such step); remove them"
            )
        db = spec.dbnet
        self.options = DbOptions(
            binarize_threshold=float(db.binarize_threshold) or _DEFAULTS.binarize_threshold,
            box_threshold=float(spec.score_threshold) or DEFAULT_BOX_THRESHOLD,
            unclip_ratio=float(db.unclip_ratio) or _DEFAULTS.unclip_ratio,
            max_candidates=int(db.max_candidates) or _DEFAULTS.max_candidates,
            dilate=db.dilation == _DB.DILATE,
            slow_score=db.score_mode == _DB.SLOW,
        )
        if not (0.0 < self.options.binarize_threshold < 1.0) or self.options.unclip_ratio < 0:
            raise FerryError(
                "ferry_image.detection.dbnet: binarize_threshold must be within 0..1 and unclip_ratio positive"
            )
        if db.reading_order not in _ORDERS:
            raise FerryError(f"ferry_image.detection.dbnet.reading_order: unknown value {db.reading_order}")
        self.reading_order = _ORDERS[db.reading_order]
        #: As many detections as contours read, unless max_detections says fewer.
        self.default_max_detections = self.options.max_candidates

    def expected_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int | None, ...]]:
        return [(ANY, 1, ANY, ANY)]

    def decode(self, tensors: Sequence[np.ndarray], score_threshold: float) -> list[Candidates]:
        raise FerryError("format DBNET maps its quadrilaterals back itself (regions)")

    def regions(
        self, probability_map: np.ndarray, transform: ImageTransform, box_threshold: float | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One image's quadrilaterals ((N, 4, 2), original pixels, clockwise from the top-left) and
        scores, in the configured reading order; ``box_threshold`` overrides the configured one."""
        options = self.options
        if box_threshold is not None:
            options = DbOptions(**{**options.__dict__, "box_threshold": box_threshold})
        # the image's own region: with pad_to_batch the map also covers the padding right and below
        region = probability_map[0, : transform.input_height, : transform.input_width]
        quads, scores = text_quads(region, transform.original_width, transform.original_height, options)
        order = reading_order(quads, self.reading_order)
        return quads[order], scores[order]
