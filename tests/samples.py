"""Test images made from the bundled models' own data: digit PNGs and synthetic detection scenes."""

from __future__ import annotations

import importlib.util
import io
from types import ModuleType

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits

from .conftest import MODEL_REPO


def png_bytes(pixels: np.ndarray) -> bytes:
    """Encode a uint8 array (H x W grayscale or H x W x 3 RGB) as a PNG file."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def digit_test_pngs() -> tuple[list[bytes], np.ndarray]:
    """The digits classifier's held-out test set as 8x8 grayscale PNG files, with their labels."""
    split = np.load(MODEL_REPO / "digits" / "test_split.npz")
    digits = load_digits()
    files = [png_bytes(np.round(digits.images[index] * 255 / 16).astype(np.uint8)) for index in split["test_indices"]]
    return files, digits.target[split["test_indices"]]


def detector_build_module() -> ModuleType:
    """digit_detector's build script, which holds the scene generator and the mAP metric (no torch needed)."""
    spec = importlib.util.spec_from_file_location("digit_detector_build", MODEL_REPO / "digit_detector" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
