"""``/ocr``: encoded pages in, for each page its lines (corners, text, confidence) out.

Each page is one request of the OCR model (pages of one call run concurrently, so their
recognition batches meet in the recogniser's batcher)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..ocr import is_ocr
from ..ocr.settings import INPUT, OUTPUTS
from ..repository.model import ModelVersion


async def read_pages(model: ModelVersion, images: list[bytes]) -> list[list[dict[str, Any]]]:
    """The lines of every page, in reading order."""
    if not is_ocr(model.config):
        raise InvalidArgument(f"model '{model.name}' is not an OCR model (platform ferry_ocr); /ocr needs one")
    assert model.scheduler is not None
    return list(await asyncio.gather(*(_page(model, image) for image in images)))


async def _page(model: ModelVersion, image: bytes) -> list[dict[str, Any]]:
    page = np.empty(1, dtype=object)
    page[0] = image
    assert model.scheduler is not None
    found = await model.scheduler.submit({INPUT: page}, list(OUTPUTS), 1)
    return [
        {"box": [[float(x), float(y)] for x, y in box], "text": text.decode("utf-8"), "score": float(score)}
        for box, text, score in zip(found["boxes"].tolist(), found["text"], found["scores"], strict=True)
    ]
