"""What every Python-model instance shares: the scheduler hands it the requests of a batch one by one
(``compute_requests``), because ``execute`` answers each request separately, and failures come back per
request as Ferry errors. ``compute`` (one request) serves warm-up and direct callers."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ErrorKind, FerryError
from ...response_streams import ResponseSink
from ..base import InstanceSpec, ModelIO, RequestBatchInstance
from .runner import Failure, Outputs


class PythonInstance(RequestBatchInstance):
    """Base of the in-process and isolated instances; subclasses implement ``execute`` and ``close``."""

    def __init__(self, spec: InstanceSpec, io: ModelIO, device: str) -> None:
        self.spec = spec
        self.io = io
        self.device = device

    def execute(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[Outputs | Failure]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def compute_requests(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        sinks: list[ResponseSink | None] | None = None,
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[Outputs | FerryError]:
        """One batch as the scheduler formed it: one result per request, an error fails only its request.
        A decoupled model's requests come with ``sinks`` that its responses go to; ``parameters`` are
        what each request's ``parameters()`` returns to the model."""
        results = (
            self.execute(inputs, outputs, parameters)
            if sinks is None
            else self.execute_decoupled(inputs, outputs, sinks, parameters)
        )
        return [as_error(r) if isinstance(r, Failure) else r for r in results]

    def execute_decoupled(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        sinks: list[ResponseSink | None],
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[Outputs | Failure]:
        return [Failure("decoupled responses need a python model in the server's process")] * len(inputs)

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        (result,) = self.compute_requests([inputs], [outputs])
        if isinstance(result, FerryError):
            raise result
        return result


def as_error(failure: Failure) -> FerryError:
    return FerryError(failure.message, ErrorKind[failure.kind])
