"""The request parameters a model's own code reads (Triton's ``request.parameters()``).

Why a context variable: the request path knows the request, the scheduler queues only tensors,
and an ensemble's steps are submitted several calls below the path; the parameters travel with
the task that submits (``asyncio.gather`` copies the context into the steps' tasks), as Triton
hands an ensemble's parameters to its composing models. ``Scheduler.submit`` keeps them on the
queued request, so they reach ``execute`` however the batch is formed.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

#: Parameters the server itself consumes (Triton's reserved names): a model never sees them.
RESERVED = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output"})

#: The parameters of the request the running task submits (None outside a request).
current_parameters: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "ferry_request_parameters", default=None
)


def model_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """What a model is shown of a request's parameters: all but the reserved ones."""
    return {key: value for key, value in parameters.items() if key not in RESERVED and not key.startswith("triton_")}
