"""The request parameters a model's own code reads (Triton's ``request.parameters()``).

The request path passes them to ``ModelScheduler.submit``, which keeps them on the queued request
so they reach ``execute`` however the batch is formed; an ensemble or the OCR model hands its
request's parameters to each step's ``submit``, as Triton hands an ensemble's parameters to its
composing models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Parameters the server itself consumes (Triton's reserved names): a model never sees them.
RESERVED = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output"})


def model_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """What a model is shown of a request's parameters: all but the reserved ones."""
    return {key: value for key, value in parameters.items() if key not in RESERVED and not key.startswith("triton_")}
