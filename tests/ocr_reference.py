"""The OCR models and their reference answers, shared by the unit and integration tests.

The three model files are not committed (16 MB, see ``model_repo/ocr/build.py``): ``ensure_models``
runs the build script when one is missing, copying them from the rapidocr-onnxruntime wheel.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import cv2
import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1] / "model_repo"
MODELS = ("text_detector", "text_angle", "text_recognizer")


def ensure_models() -> Path:
    """The model repository, with the OCR model files built if they are missing."""
    if (
        not all((REPOSITORY / name / "1" / "model.onnx").is_file() for name in MODELS)
        or not (REPOSITORY / "text_recognizer" / "characters.txt").is_file()
    ):
        subprocess.run([sys.executable, str(REPOSITORY / "ocr" / "build.py")], check=True, timeout=600)
    return REPOSITORY


@functools.cache
def reference() -> dict[str, Any]:
    return json.loads((REPOSITORY / "ocr" / "reference.json").read_text(encoding="utf-8"))


@functools.cache
def reference_module() -> ModuleType:
    """``model_repo/ocr/reference.py`` (its ``photos`` and ``crop_digest``)."""
    sys.path.insert(0, str(REPOSITORY))
    spec = importlib.util.spec_from_file_location("ocr_reference_script", REPOSITORY / "ocr" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def photos() -> dict[str, bytes]:
    return reference_module().photos()


@functools.cache
def reference_lines() -> dict[str, Any]:
    """rapidocr 3.10's answers (``model_repo/ocr/reference_lines.py``): its detector's boxes and
    its OCR lines, each in its own (``LINE_GROUPS``) order, on ``photos()`` and ``tilted()``."""
    return json.loads((REPOSITORY / "ocr" / "reference_lines.json").read_text(encoding="utf-8"))


@functools.cache
def tilted() -> dict[str, bytes]:
    """The turned receipt pages of ``reference_lines.py``, where the two sorts disagree."""
    spec = importlib.util.spec_from_file_location("ocr_reference_lines", REPOSITORY / "ocr" / "reference_lines.py")
    assert spec is not None and spec.loader is not None
    reference_module()  # puts model_repo/ on sys.path for the script's imports
    sys.path.insert(0, str(REPOSITORY / "ocr"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tilted()


def bgr(encoded: bytes) -> np.ndarray:
    """Decoded as rapidocr's ``LoadImage`` does for bytes: Pillow, then grey or RGB to BGR."""
    from PIL import Image

    pixels = np.array(Image.open(io.BytesIO(encoded)))
    return cv2.cvtColor(pixels, cv2.COLOR_GRAY2BGR if pixels.ndim == 2 else cv2.COLOR_RGB2BGR)


def characters() -> list[str]:
    text = (REPOSITORY / "text_recognizer" / "characters.txt").read_text(encoding="utf-8")
    return text.split("\n")[:-1]
