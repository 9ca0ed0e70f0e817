"""What an ensemble step needs from a composing model, and how a composite model runs one.

Any model kind (an engine model, a Python model, a vision step) can be an ensemble step if it
offers these attributes; ``repository.model.ModelVersion`` does. Keep this small: it is the
contract other model kinds implement.

A composite model (an ensemble, the OCR model) resolves its steps once per request and hands each
step's request to a ``StepPath``: the request path's (``inference.path.RequestPath.serve_step``),
so a step is validated, traced, split to the step model's batch size and retried once on a
version being replaced, as any request is (Triton's ensemble scheduler sends each step through
the server's normal entry too). The runner reaches the composite through ``ComposingModels``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..scheduling.interface import Execution, ModelScheduler, RequestTiming
from ..types import TensorSpec

if TYPE_CHECKING:
    from ..response_streams import ResponseSink

Outputs = dict[str, np.ndarray]


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
    def labels(self) -> dict[str, list[str]]: ...

    @property
    def decoupled(self) -> bool: ...

    @property
    def scheduler(self) -> ModelScheduler: ...


@dataclass(slots=True)
class StepRequest:
    """One step's request: the model the composite resolved for it, the version the step asks for
    ("" the latest; where a reload retry looks), its inputs (batch first when the model batches)
    and the outputs it wants. ``composite`` is the composite model's execution, whose priority,
    timeout, parameters (a Python step reads them) and admission ticket (a step's images count on
    it) each step takes; ``timing`` sums the composite's time spent in its steps; ``sink`` takes a
    decoupled last step's responses."""

    model: StepModel
    version: str
    inputs: Outputs
    outputs: list[str]
    composite: Execution
    timing: RequestTiming
    sink: ResponseSink | None = None
    #: inputs the composite made itself, bounded there (an OCR page's detector input, crops, lines)
    preprocessed: frozenset[str] = frozenset()


class StepPath(Protocol):
    """Serves one step's request through the request path and returns its outputs (config dims)."""

    async def __call__(self, step: StepRequest) -> Outputs: ...


class ComposingModels(Protocol):
    """Where a composite model finds its steps and the path that serves them (the model manager)."""

    def get(self, name: str, version: str = "") -> StepModel: ...

    @property
    def step_path(self) -> StepPath: ...
