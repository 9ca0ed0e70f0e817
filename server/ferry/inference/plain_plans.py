"""Plans: what every handed-off request of one model load and one signature shares, checked once.

An intake's requests to a model mostly repeat one signature (input names, datatypes and shapes,
the outputs asked for, no parameters). Checking each against the config (names, datatypes, shapes,
batch size, requested outputs), then computing the batcher's signature and the answer's datatypes,
cost the model process's one core more per request than queueing it; a plan is that work's outcome,
kept by the hub per signature (``intake.handoff.HubConnection``), so a request of a known signature
is queued with its arena views and its ticket (``RequestPath.queue_planned``) and answered with its
batch's (``Scheduler.enqueue_answered``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import FerryError
from ..repository.model import ModelVersion
from ..scheduling.interface import Outputs
from .validation import engine_output


@dataclass(frozen=True, slots=True, eq=False)
class PlainPlan:
    """Requests of one signature to ``model``, validated: each is one execution of ``batch_size``
    items with batch signature ``signature``, answered with ``answers`` (name, datatype, binary).
    Equal only to itself (a key of the answers a batch groups by plan)."""

    model: ModelVersion
    version: str  # the model's version as answers name it
    names: list[str]  # the outputs each execution asks for (shared by its executions, never changed)
    batch_size: int
    signature: tuple
    answers: tuple[tuple[str, str, bool], ...]
    asked: bool  # the requests name their outputs (else one the model leaves out is left out)
    parameters: dict[str, Any]  # the requests' (only ``ANSWER_PARAMETERS``; never changed)

    def answered(self, results: Outputs) -> list[np.ndarray | None]:
        """An execution's outputs in ``answers``' order, in the config's dims (as
        ``DataPlane._tensors``: an output the model left out fails the request that asked for it,
        and is None, left out of the answer, for one that did not name its outputs)."""
        model = self.model
        batched = model.max_batch_size > 0
        arrays: list[np.ndarray | None] = []
        for name, _, _ in self.answers:
            array = results.get(name)
            if array is None and self.asked:
                raise FerryError(f"model '{model.name}' returned no output '{name}', which the request asked for")
            arrays.append(
                array if array is None else engine_output(model.outputs[name], array, self.batch_size, batched)
            )
        return arrays
