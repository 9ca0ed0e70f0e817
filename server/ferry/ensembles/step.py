"""What an ensemble step needs from a composing model, and nothing more.

Any model kind (an engine model, a Python model, a vision step) can be an ensemble step if it
offers these attributes; ``repository.model.ModelVersion`` does. Keep this small: it is the
contract other model kinds implement.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..scheduling.scheduler import RequestTiming
from ..scheduling.timeline import Timeline
from ..types import TensorSpec


class StepScheduler(Protocol):
    """The entry point a step's requests go through (the composing model's own batcher)."""

    async def submit(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        batch_size: int = 1,
        priority: int | None = None,
        timeout_us: int | None = None,
        timeline: Timeline | None = None,
        timing: RequestTiming | None = None,
        sink: Any = None,
    ) -> dict[str, np.ndarray]:
        """Run one request (``batch_size`` items when batched) and return the asked outputs.

        Fills ``timing`` (queue and compute durations) when given, for the ensemble's statistics.
        A decoupled model takes a ``sink`` (``put``, ``cancelled``) that its responses go to.
        """
        ...


class StepModel(Protocol):
    """A loaded composing model: its metadata (as the config declares it) and its scheduler."""

    name: str
    version: int
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]

    @property
    def max_batch_size(self) -> int: ...

    @property
    def scheduler(self) -> StepScheduler | None: ...
