"""``/ocr``: encoded pages in, for each page its lines (corners, text, confidence) out.

Each page is one V2 request of the OCR model through the one request path (validated, traced,
with ``priority`` and ``timeout``, counted in the statistics, retried on the version that replaces
one being unloaded); the pages of one call run concurrently (``PAGES_AT_ONCE`` at a time), so their
recognition batches meet in the recogniser's batcher."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..inference.path import RequestPath
from ..ocr import is_ocr
from ..ocr.settings import INPUT, OUTPUTS
from ..repository.model import ModelVersion
from ..types import InferenceRequest, Reserves

#: Pages of one call read at once: each holds its stages' buffers (counted in the call's admission
#: while they are held), so a call of many pages holds a few pages' worth, not all of them.
PAGES_AT_ONCE = 2


async def read_pages(
    path: RequestPath,
    model: ModelVersion,
    images: list[bytes],
    parameters: dict[str, Any],
    ticket: Reserves | None = None,
) -> list[list[dict[str, Any]]]:
    """The lines of every page, in reading order; each page's stages count on the call's ``ticket``."""
    if not is_ocr(model.config):
        raise InvalidArgument(f"model '{model.name}' is not an OCR model (platform ferry_ocr); /ocr needs one")
    at_once = asyncio.Semaphore(PAGES_AT_ONCE)

    async def page(image: bytes) -> list[dict[str, Any]]:
        async with at_once:
            return await _page(path, model, image, parameters, ticket)

    return list(await asyncio.gather(*(page(image) for image in images)))


async def _page(
    path: RequestPath, model: ModelVersion, image: bytes, parameters: dict[str, Any], ticket: Reserves | None
) -> list[dict[str, Any]]:
    page = np.empty(1, dtype=object)
    page[0] = image
    request = InferenceRequest(
        model.name,
        str(model.version),
        inputs={INPUT: page},
        input_datatypes={INPUT: "BYTES"},
        parameters=parameters,
        ticket=ticket,
    )
    found, _ = (await path.serve(model, request, list(OUTPUTS))).tensors()
    return [
        {"box": [[float(x), float(y)] for x, y in box], "text": text.decode("utf-8"), "score": float(score)}
        for box, text, score in zip(found["boxes"].tolist(), found["text"], found["scores"], strict=True)
    ]
