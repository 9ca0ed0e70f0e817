"""What a model's engine holds while it runs one execution, counted on the request's ticket before
it runs.

ONNX Runtime's buffers for a run are its own: nothing the front doors count. For PP-OCR's detector
they are 10-25 bytes a byte of input (an 8-MP page: +1.4 GB), so an input within every limit could
still pass the memory goal. A model's config says how much with its ``working_memory_factor``
parameter (bytes per byte of input, measured with ``benchmarks/working_memory.py``); the path holds
that many bytes times the execution's input bytes while the execution runs, in the engine budget
(``--max-engine-memory-bytes``, ``api.admission.EngineMemory``) reached through the request's
ticket: refused (413 when the execution alone cannot fit, else 503) before the engine pays it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from ..errors import PayloadTooLarge, Unavailable
from ..repository.model import WORKING_MEMORY_FACTOR, ModelVersion
from ..types import Reserves


def working_bytes(model: ModelVersion, inputs: Mapping[str, np.ndarray]) -> int:
    """Bytes ``model``'s engine holds while it runs on ``inputs`` (0: its config says nothing)."""
    if not model.working_memory_factor:
        return 0
    return int(model.working_memory_factor * sum(array.nbytes for array in inputs.values()))


def hold_working_memory(
    model: ModelVersion, inputs: Mapping[str, np.ndarray], ticket: Reserves | None
) -> Callable[[], None] | None:
    """Count the engine's working memory for ``inputs`` through ``ticket``: what uncounts it (None
    when nothing was counted). The refusal names the model, its factor and the bytes, then the
    limit admission found passed."""
    nbytes = working_bytes(model, inputs) if ticket is not None else 0
    if not nbytes:
        return None
    assert ticket is not None
    try:
        return ticket.hold_engine(nbytes)
    except Unavailable as exc:
        raise Unavailable(f"{_refused(model, inputs, nbytes)}: {exc.message}", retry_after=exc.retry_after) from None
    except PayloadTooLarge as exc:
        raise PayloadTooLarge(f"{_refused(model, inputs, nbytes)}: {exc.message}") from None


@contextlib.contextmanager
def working_memory_counted(
    model: ModelVersion, inputs: Mapping[str, np.ndarray], ticket: Reserves | None
) -> Iterator[None]:
    """``hold_working_memory`` while the block runs."""
    release = hold_working_memory(model, inputs, ticket)
    try:
        yield
    finally:
        if release is not None:
            release()


def _refused(model: ModelVersion, inputs: Mapping[str, np.ndarray], nbytes: int) -> str:
    """What a refusal says first: the model, its factor and the bytes (built only when refused)."""
    return (
        f"model '{model.name}' holds about {nbytes} bytes while it runs on these inputs "
        f"({model.working_memory_factor:g} x their {sum(a.nbytes for a in inputs.values())} bytes, "
        f"parameters '{WORKING_MEMORY_FACTOR}')"
    )
