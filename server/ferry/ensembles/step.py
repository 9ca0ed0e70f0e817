"""What an ensemble step needs from a composing model, and nothing more.

Any model kind (an engine model, a Python model, a vision step) can be an ensemble step if it
offers these attributes; ``repository.model.ModelVersion`` does. Keep this small: it is the
contract other model kinds implement.
"""

from __future__ import annotations

from typing import Protocol

from ..scheduling.interface import ModelScheduler
from ..types import TensorSpec


class StepModel(Protocol):
    """A loaded composing model: its metadata (as the config declares it) and its scheduler."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def inputs(self) -> dict[str, TensorSpec]: ...

    @property
    def outputs(self) -> dict[str, TensorSpec]: ...

    @property
    def max_batch_size(self) -> int: ...

    @property
    def scheduler(self) -> ModelScheduler: ...
