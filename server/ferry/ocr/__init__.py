"""The OCR model (``platform: "ferry_ocr"``): one request runs text detection, angle
classification and recognition, three composing models with built-in steps between them
(``ferry.pipelines.text``), as rapidocr_onnxruntime's ``RapidOCR()`` does.

``settings`` reads the config, ``steps`` holds the CPU work of one page (run in a worker
thread), ``scheduler`` sends each model's share through that model's own scheduler (so the
recognition batches of concurrent pages meet in the recogniser's dynamic batcher), ``loader``
builds the model version.
"""

PLATFORM = "ferry_ocr"
