"""The OpenCV whose pixels the tests prove, and which one is installed (issue 26).

OpenCV releases move pixels, and several references are exact only under one of them:

* MediaPipe 0.10.14's face detections (``model_repo/face_detector/reference.json``) are reproduced
  exactly only by opencv-python-headless 4.10.0.84's ``warpPerspective``, which writes the pixels
  MediaPipe's own bundled OpenCV does. 5.0 changed the warp: a border face's score moves by 0.0012,
  past the 1e-3 tolerance, and ``test_corners_warp_pixels_are_opencv_410s`` pins two warps by SHA-256.
* The OCR references (``model_repo/ocr/reference.json``) are rapidocr_onnxruntime 1.4.4's answers
  under that same 4.10.0.84: its text-line crops are ``warpPerspective`` too, and under 5.0 every
  crop's SHA-256 differs, scores move by up to 0.022 and one line reads differently.

So ``pyproject.toml`` pins ``PIN`` and ``tests/unit/test_opencv_pin.py`` fails, naming the
pin, when the installed OpenCV is outside it. Moving the pin means installing the new OpenCV,
regenerating ``model_repo/ocr/reference.json`` with it (``model_repo/ocr/reference.py``), checking
the face detector against MediaPipe again and updating ``CORNERS_CHECKSUMS`` and ``PIN``.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import cv2
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
#: The range whose pixels the tests prove; pyproject.toml must pin exactly this.
PIN = "opencv-python-headless>=4.10.0.84,<4.11"
PROVEN_OPENCV = Requirement(PIN)


def pinned_opencv() -> Requirement:
    """The OpenCV requirement in pyproject.toml (read as text: tomllib is not in Python 3.10)."""
    [line] = re.findall(rf'^\s*"({re.escape(PROVEN_OPENCV.name)}[^"]*)",', PYPROJECT.read_text(), re.MULTILINE)
    return Requirement(line)


def installed_opencv() -> list[tuple[str, str]]:
    """(distribution, version) of every installed package whose files include the imported ``cv2``
    (two, when opencv-python and opencv-python-headless overwrite one another's files)."""
    imported = Path(cv2.__file__).resolve()
    owners = importlib.metadata.packages_distributions().get("cv2", [])
    found = []
    for name in dict.fromkeys(owners):
        for distribution in importlib.metadata.distributions(name=name):
            if Path(str(distribution.locate_file("cv2/__init__.py"))).resolve() == imported:
                found.append((distribution.metadata["Name"], distribution.version))
    return found


def describe_installed() -> str:
    """One line for test failures and the report header."""
    owners = ", ".join(f"{name} {version}" for name, version in installed_opencv()) or "no package found"
    return f"cv2 {cv2.__version__} from {cv2.__file__} ({owners}); proven: {PIN}"
