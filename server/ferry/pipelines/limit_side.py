"""``resize: LIMIT_SIDE``: a variable-size input (height and width -1) takes each image at the
size a rule gives it, as PaddleOCR's text detector (``DetResizeForTest``): scaled so the shorter
side reaches ``limit_side_len`` (``LIMIT_MIN``) or the longer side fits it (``LIMIT_MAX``), each
side truncated and rounded to a multiple of ``size_multiple``. The rule is ``text.sizes.limit_side``,
the one the OCR model kind uses. Images of different sizes never share an execution
(``ImagePipeline.executions``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferry.errors import InvalidArgument, ModelLoadError
from ferry_client.protocol import model_config_pb2 as mc

from .geometry import ImageTransform, Placement
from .text.sizes import LimitType, limit_side

if TYPE_CHECKING:
    from .preprocess import PreprocessSpec

_PRE = mc.FerryPreprocess
_FIELD = "ferry_image.preprocess"
#: PaddleOCR rounds each side to a multiple of 32 (the detector's stride).
DEFAULT_MULTIPLE = 32
_LIMIT_TYPES: dict[int, LimitType] = {_PRE.LIMIT_MIN: LimitType.MIN, _PRE.LIMIT_MAX: LimitType.MAX}
FIELDS = ("limit_side_len", "limit_type", "size_multiple")


def check_limit_side(pre: mc.FerryPreprocess, height: int, width: int, variable_sizes: bool) -> dict[str, Any]:
    """The spec fields of LIMIT_SIDE (none for another mode, whose use of its fields is refused)."""
    if pre.resize != _PRE.LIMIT_SIDE:
        for field in FIELDS:
            if getattr(pre, field):
                raise ModelLoadError(f"{_FIELD}.{field}: only applies to resize: LIMIT_SIDE")
        return {}
    if height > 0 or width > 0:
        raise ModelLoadError(
            f"{_FIELD}.resize: LIMIT_SIDE sizes each image by its rule, so the input's height and width must be -1, "
            f"got {height} x {width}"
        )
    if not variable_sizes:
        raise ModelLoadError(f"{_FIELD}.resize: LIMIT_SIDE gives tensors of varying size; this step writes one size")
    if pre.limit_side_len <= 0:
        raise ModelLoadError(f"{_FIELD}.limit_side_len: LIMIT_SIDE needs the side length (PP-OCRv4's detector: 736)")
    if pre.limit_type not in _LIMIT_TYPES:
        raise ModelLoadError(f"{_FIELD}.limit_type: unknown value {pre.limit_type}")
    return {
        "limit_side_len": int(pre.limit_side_len),
        "limit_type": pre.limit_type,
        "size_multiple": int(pre.size_multiple) or DEFAULT_MULTIPLE,
    }


def limit_side_placement(width: int, height: int, spec: PreprocessSpec) -> Placement:
    """The whole image stretched to the rule's size (each axis by its own ratio)."""
    new_w, new_h = limit_side(width, height, spec.limit_side_len, _LIMIT_TYPES[spec.limit_type], spec.size_multiple)
    if new_w <= 0 or new_h <= 0:
        raise InvalidArgument(
            f"a {width}x{height} image rounds to nothing under limit_side_len {spec.limit_side_len} "
            f"(sides in multiples of {spec.size_multiple})"
        )
    transform = ImageTransform(new_w / width, new_h / height, 0.0, 0.0, width, height, new_w, new_h)
    return Placement((new_w, new_h), 0, 0, new_h, new_w, 0, 0, transform)
