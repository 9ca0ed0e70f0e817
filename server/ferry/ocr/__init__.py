"""The OCR model (``platform: "ferry_ocr"``): one request runs text detection, angle
classification and recognition, three composing models with built-in steps between them
(``ferry.pipelines.text``), as rapidocr_onnxruntime's ``RapidOCR()`` does.

``settings`` reads the config, ``steps`` holds the CPU work of one page (run in a worker
thread), ``scheduler`` sends each model's share as a request of its own through the request path
(``ensembles.step.StepPath``), so the recognition batches of concurrent pages meet in the
recogniser's dynamic batcher;
``repository/ocr_loader.py`` builds the model version and ``api/ocr_pages.py`` answers ``/ocr``.
"""

from __future__ import annotations

from ferry_client.protocol import model_config_pb2 as mc

PLATFORM = "ferry_ocr"


def is_ocr(config: mc.ModelConfig) -> bool:
    """Whether a config describes an OCR model."""
    return config.platform == PLATFORM
