"""An OCR model's config: which models do each stage, and the reference's thresholds.

Everything is a ``parameters`` entry (string values), so a plain Triton-style ``config.pbtxt``
carries it; an unknown key fails the load, as does a value that is not a number where one is due or
a number outside its range (``RANGES``: what the page, its crops and the recognition batches are
sized by, so a load-API override of 2^62 or NaN cannot reach a page).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from ferry_client.protocol import model_config_pb2 as mc

from ..config_ranges import Range
from ..errors import ModelLoadError
from ..pipelines.text.db import DbOptions
from ..pipelines.text.reading import CropWarp, PageOptions, ReadingOrder
from ..pipelines.text.sizes import LimitType

INPUT = "IMAGE"
OUTPUTS = ("boxes", "text", "scores")
_MODELS = {"detector": "text_detector", "angle_classifier": "text_angle", "recognizer": "text_recognizer"}
_DETECTOR_SIZE = ("limit_side_len", "limit_type")
_READING_ORDER = "reading_order"
_CROP_WARP = "crop_warp"
#: rapidocr_onnxruntime 1.4.4's ``RapidOCR.sorted_boxes``.
DEFAULT_READING_ORDER = ReadingOrder.NEIGHBOUR_SWAP
#: PP-OCRv4's detector size rule in rapidocr: the shorter side up to 736.
DEFAULT_LIMIT, DEFAULT_LIMIT_TYPE = 736, "min"
_SIDE, _PROBABILITY = Range(1, 8192), Range(0, 1)
#: The range of every number an OCR model's parameters carry.
RANGES = {
    "limit_side_len": _SIDE,
    "binarize_threshold": _PROBABILITY,
    "box_threshold": _PROBABILITY,
    "unclip_ratio": Range(0, 16),
    "max_candidates": Range(0, 100_000),
    "max_side": _SIDE,
    "min_side": Range(0, 4096),
    "min_height": Range(0, 4096),
    "width_height_ratio": Range(0, 1000),
    "text_score": _PROBABILITY,
    "angle_threshold": _PROBABILITY,
    "recognition_batch": Range(1, 256),
    "recognition_height": Range(1, 256),
    "recognition_min_width": _SIDE,
    "max_text_boxes": Range(1, 100_000),
    "max_detector_pixels": Range(0, 2 * 8192**2),
}


@dataclass(frozen=True)
class OcrSettings:
    detector: str
    angle_classifier: str
    recognizer: str
    limit_side_len: int
    limit_type: LimitType
    reading_order: ReadingOrder
    crop_warp: CropWarp
    db: DbOptions
    page: PageOptions


def ocr_settings(config: mc.ModelConfig, source: str) -> OcrSettings:
    """The settings of ``config``, with rapidocr_onnxruntime 1.4.4's defaults for what it leaves out."""
    values = {key: config.parameters[key].string_value for key in config.parameters}
    number_fields = {f.name: f.type for f in (*fields(DbOptions), *fields(PageOptions))}
    known = {*_MODELS, *_DETECTOR_SIZE, _READING_ORDER, _CROP_WARP, *number_fields}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ModelLoadError(
            f"{source}: ferry_ocr does not know parameters {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    try:
        limit_type = LimitType(values.get("limit_type", DEFAULT_LIMIT_TYPE))
    except ValueError:
        raise ModelLoadError(
            f"{source}: parameters 'limit_type' must be min or max, got {values['limit_type']}"
        ) from None
    order = _choice(values, _READING_ORDER, DEFAULT_READING_ORDER, source)
    crop_warp = _choice(values, _CROP_WARP, CropWarp.OPENCV, source)
    db = DbOptions(**{f.name: _number(values, f.name, getattr(DbOptions(), f.name), source) for f in fields(DbOptions)})
    page = PageOptions(
        **{f.name: _number(values, f.name, getattr(PageOptions(), f.name), source) for f in fields(PageOptions)}
    )
    limit = int(_number(values, "limit_side_len", DEFAULT_LIMIT, source))
    if page.max_detector_pixels == 0:  # 0: twice max_side squared
        page = replace(page, max_detector_pixels=2 * page.max_side**2)
    return OcrSettings(
        **{role: values.get(role) or default for role, default in _MODELS.items()},
        limit_side_len=limit,
        limit_type=limit_type,
        reading_order=order,
        crop_warp=crop_warp,
        db=db,
        page=page,
    )


E = TypeVar("E", ReadingOrder, CropWarp)


def _choice(values: dict[str, str], key: str, default: E, source: str) -> E:
    """``values[key]`` as one of the default's enum values, or the default."""
    kind = type(default)
    try:
        return kind(values.get(key, default.value))
    except ValueError:
        choices = ", ".join(o.value for o in kind)
        raise ModelLoadError(f"{source}: parameters '{key}' must be one of {choices}, got {values[key]}") from None


def _number(values: dict[str, str], key: str, default: Any, source: str) -> Any:
    """``values[key]`` parsed as the default's type (bools as true/false), or the default."""
    if key not in values:
        return default
    text = values[key].strip()
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        number = type(default)(text)
    except ValueError:
        raise ModelLoadError(
            f"{source}: parameters '{key}' must be a {type(default).__name__}, got {values[key]!r}"
        ) from None
    RANGES[key].check(number, f"parameters '{key}'", source)
    return number
