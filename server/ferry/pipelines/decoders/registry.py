"""Which decoder serves a ``FerryDetection.format``: one module per family, registered here."""

from __future__ import annotations

from ferry.errors import FerryError
from ferry_client.protocol import model_config_pb2 as mc

from .base import Decoder, InputSize
from .boxes_scores_classes import BoxesScoresClassesDecoder
from .dbnet import DbNetDecoder
from .detr import DetrDecoder
from .dfl import DflDecoder
from .end_to_end import EndToEndDecoder
from .ssd import SsdDecoder
from .yolo import YoloV5Decoder, YoloV8Decoder
from .yolox import YoloxDecoder

_DET = mc.FerryDetection

_DECODERS: dict[int, type[Decoder]] = {
    _DET.YOLOV8: YoloV8Decoder,
    _DET.YOLOV5: YoloV5Decoder,
    _DET.BOXES_SCORES_CLASSES: BoxesScoresClassesDecoder,
    _DET.YOLOX: YoloxDecoder,
    _DET.SSD: SsdDecoder,
    _DET.DFL: DflDecoder,
    _DET.DETR: DetrDecoder,
    _DET.END_TO_END: EndToEndDecoder,
    _DET.DBNET: DbNetDecoder,
}


def decoder_for(spec: mc.FerryDetection, size: InputSize) -> Decoder:
    """The decoder for the spec's format, laid out on a model input of ``size``."""
    try:
        family = _DECODERS[spec.format]
    except KeyError:
        raise FerryError(f"ferry_image.detection.format: unknown value {spec.format}") from None
    if spec.HasField("dbnet") and spec.format != _DET.DBNET:
        raise FerryError(
            f"ferry_image.detection.dbnet: only applies to format: DBNET, not {_DET.DetectionFormat.Name(spec.format)}"
        )
    return family(spec, size)
