"""FP16 ONNX for GPU execution providers, with onnxruntime's maintained float16 converter.

Inputs and outputs stay FP32 by default (``keep_io_types``): clients and the image pipeline keep
sending FP32 and the cast happens on the device, where it is nearly free.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnxruntime.transformers.float16 import convert_float_to_float16


def convert_fp16(source: Path, destination: Path, keep_io_types: bool = True) -> None:
    """Write the FP16 version of ``source`` to ``destination``."""
    model = onnx.load(str(source))
    converted = convert_float_to_float16(model, keep_io_types=keep_io_types)
    onnx.save(converted, str(destination))
