"""CTC text recognisers (PP-OCR's recogniser) as an image task: each line's per-step class
probabilities to its text and confidence, with ``text.ctc`` (the decoding the OCR model kind
uses). Served by ``/recognize`` and as the ``TEXT`` (BYTES) and ``TEXT_SCORE`` (FP32) outputs of
V2 infer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ferry.errors import FerryError, ModelLoadError
from ferry.types import TensorSpec
from ferry_client.protocol import model_config_pb2 as mc

from .text.ctc import ctc_characters, ctc_greedy

TEXT_OUTPUT = "TEXT"
SCORE_OUTPUT = "TEXT_SCORE"
_FIELD = "ferry_image.text_recognition"


def recognition_characters(
    spec: mc.FerryTextRecognition, output: str, dims: Sequence[int], labels: list[str] | None, max_batch_size: int
) -> list[str]:
    """Class index to character (blank, the dictionary, space), checked against the output at load."""
    steps = tuple(dims[1:]) if max_batch_size == 0 and len(dims) == 3 and dims[0] == 1 else tuple(dims)
    if len(steps) != 2:
        raise ModelLoadError(f"{_FIELD}: output '{output}' must be [T, classes] per line, got dims {list(dims)}")
    if not labels:
        raise ModelLoadError(
            f"{_FIELD}: output '{output}' needs its dictionary as label_filename (one character per line)"
        )
    characters = ctc_characters(labels)
    if steps[1] not in (-1, len(characters)):
        raise ModelLoadError(
            f"{_FIELD}: output '{output}' has {steps[1]} classes, but blank + {len(labels)} dictionary entries + "
            f"space are {len(characters)}"
        )
    return characters


def recognition_tensor_specs() -> dict[str, TensorSpec]:
    """The decoded outputs (dims after the line axis): one text and one confidence per line."""
    return {TEXT_OUTPUT: TensorSpec(TEXT_OUTPUT, "BYTES", ()), SCORE_OUTPUT: TensorSpec(SCORE_OUTPUT, "FP32", ())}


def recognise(probabilities: np.ndarray, characters: list[str]) -> list[tuple[str, float]]:
    """(text, confidence) per line of a (lines, T, classes) batch."""
    if probabilities.ndim != 3 or probabilities.shape[2] != len(characters):
        raise FerryError(
            f"{_FIELD}: expected (lines, T, {len(characters)}) probabilities, got {list(probabilities.shape)}"
        )
    return ctc_greedy(probabilities, characters)


def recognition_tensors(lines: list[tuple[str, float]]) -> dict[str, np.ndarray]:
    """``TEXT`` (UTF-8 bytes) and ``TEXT_SCORE`` (float32), one per line."""
    text = np.empty(len(lines), dtype=object)
    text[:] = [line.encode("utf-8") for line, _ in lines]
    return {TEXT_OUTPUT: text, SCORE_OUTPUT: np.array([score for _, score in lines], dtype=np.float32)}
