"""``resize: TEXT_LINE``: a text line at the input's fixed height, its aspect ratio kept and its
width capped at the tensor's, zeros (the normalised value) to the right, as PaddleOCR's
``resize_norm_img`` for the angle classifier (tensor 48 x 192) and the recogniser (48 x at least
320, dynamic width). The rules are ``text.sizes``' ``text_line_width`` and ``recognition_width``,
the ones the OCR model kind uses. With a dynamic width each line gets
``max(text_line_min_width, int(height * w / h))`` columns, so lines of different widths never
share an execution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferry.errors import ModelLoadError
from ferry_client.protocol import model_config_pb2 as mc

from .geometry import ImageTransform, Placement
from .text.sizes import recognition_width, text_line_width

if TYPE_CHECKING:
    from .preprocess import PreprocessSpec

_PRE = mc.FerryPreprocess
_FIELD = "ferry_image.preprocess"
#: PaddleOCR's recogniser input (rec_image_shape 3, 48, 320): the narrowest batch.
DEFAULT_MIN_WIDTH = 320
#: Bounds a line's tensor (PaddleOCR has none): wider lines are squeezed to this.
DEFAULT_MAX_WIDTH = 4096
FIELDS = ("text_line_min_width", "text_line_max_width")


def check_text_line(pre: mc.FerryPreprocess, height: int, width: int, variable_sizes: bool) -> dict[str, Any]:
    """The spec fields of TEXT_LINE (none for another mode, whose use of its fields is refused)."""
    if pre.resize != _PRE.TEXT_LINE or width > 0:
        for field in FIELDS:
            if getattr(pre, field):
                raise ModelLoadError(f"{_FIELD}.{field}: only applies to resize: TEXT_LINE with a dynamic width (-1)")
    if pre.resize != _PRE.TEXT_LINE:
        return {}
    if height <= 0:
        raise ModelLoadError(f"{_FIELD}.resize: TEXT_LINE needs a fixed input height (PaddleOCR's 48), got {height}")
    if pre.pad_value != 0.0:
        raise ModelLoadError(
            f"{_FIELD}.pad_value: TEXT_LINE pads with zeros after normalising (as PaddleOCR), got {pre.pad_value}"
        )
    if width > 0:
        return {}
    if not variable_sizes:
        raise ModelLoadError(f"{_FIELD}.resize: TEXT_LINE with a dynamic width gives tensors of varying width")
    low = int(pre.text_line_min_width) or DEFAULT_MIN_WIDTH
    high = int(pre.text_line_max_width) or DEFAULT_MAX_WIDTH
    if high < low:
        raise ModelLoadError(f"{_FIELD}.text_line_max_width: {high} is below text_line_min_width {low}")
    return {"text_line_min_width": low, "text_line_max_width": high}


def text_line_placement(width: int, height: int, spec: PreprocessSpec) -> Placement:
    """The line resized to the input height at its aspect ratio (capped), at the tensor's left."""
    if spec.width > 0:
        tensor_width = spec.width
    else:
        wanted = recognition_width([width / float(height)], spec.height, spec.text_line_min_width)
        tensor_width = min(wanted, spec.text_line_max_width)
    resized = text_line_width(width, height, spec.height, tensor_width)
    transform = ImageTransform(
        resized / width, spec.height / height, 0.0, 0.0, width, height, tensor_width, spec.height
    )
    return Placement((resized, spec.height), 0, 0, spec.height, resized, 0, 0, transform)
