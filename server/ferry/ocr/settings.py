"""An OCR model's config: which models do each stage, and the reference's thresholds.

Everything is a ``parameters`` entry (string values), so a plain Triton-style ``config.pbtxt``
carries it; an unknown key fails the load, as does a value that is not a number where one is due.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ferry_client.protocol import model_config_pb2 as mc

from ..errors import ModelLoadError
from ..pipelines.text.db import DbOptions
from ..pipelines.text.reading import PageOptions
from ..pipelines.text.sizes import LimitType

INPUT = "IMAGE"
OUTPUTS = ("boxes", "text", "scores")
_MODELS = {"detector": "text_detector", "angle_classifier": "text_angle", "recognizer": "text_recognizer"}
_DETECTOR_SIZE = ("limit_side_len", "limit_type")
#: PP-OCRv4's detector size rule in rapidocr: the shorter side up to 736.
DEFAULT_LIMIT, DEFAULT_LIMIT_TYPE = 736, "min"


@dataclass(frozen=True)
class OcrSettings:
    detector: str
    angle_classifier: str
    recognizer: str
    limit_side_len: int
    limit_type: LimitType
    db: DbOptions
    page: PageOptions


def ocr_settings(config: mc.ModelConfig, source: str) -> OcrSettings:
    """The settings of ``config``, with rapidocr_onnxruntime 1.4.4's defaults for what it leaves out."""
    values = {key: config.parameters[key].string_value for key in config.parameters}
    number_fields = {f.name: f.type for f in (*fields(DbOptions), *fields(PageOptions))}
    known = {*_MODELS, *_DETECTOR_SIZE, *number_fields}
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
    db = DbOptions(**{f.name: _number(values, f.name, getattr(DbOptions(), f.name), source) for f in fields(DbOptions)})
    page = PageOptions(
        **{f.name: _number(values, f.name, getattr(PageOptions(), f.name), source) for f in fields(PageOptions)}
    )
    limit = int(_number(values, "limit_side_len", DEFAULT_LIMIT, source))
    if limit <= 0 or page.recognition_batch <= 0 or page.recognition_height <= 0 or page.max_text_boxes <= 0:
        raise ModelLoadError(
            f"{source}: limit_side_len, recognition_batch, recognition_height and max_text_boxes must be positive"
        )
    if page.max_detector_pixels < 0:
        raise ModelLoadError(f"{source}: parameters 'max_detector_pixels' must be positive (0: twice max_side squared)")
    if page.max_detector_pixels == 0:
        page = replace(page, max_detector_pixels=2 * page.max_side**2)
    return OcrSettings(
        **{role: values.get(role) or default for role, default in _MODELS.items()},
        limit_side_len=limit,
        limit_type=limit_type,
        db=db,
        page=page,
    )


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
        return type(default)(text)
    except ValueError:
        raise ModelLoadError(
            f"{source}: parameters '{key}' must be a {type(default).__name__}, got {values[key]!r}"
        ) from None
