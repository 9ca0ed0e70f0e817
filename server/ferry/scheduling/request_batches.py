"""The Python-model runner: the dynamic batcher, with each batch handed over as its requests.

A Python model answers each request of a batch on its own (Triton's ``execute(requests)``), so
its batches are never concatenated or split: the instance gets the requests as they came and
returns one result per request, outputs or the error that fails that request alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..backends.base import Instance, RequestBatchInstance
from ..statistics import ModelStats
from .policy import SchedulingPolicy
from .request_parameters import model_parameters
from .scheduler import Outputs, Pending, Scheduler


class RequestBatchScheduler(Scheduler):
    """Queues and batches like ``Scheduler``; runs each batch request by request."""

    def __init__(
        self,
        name: str,
        instances: Sequence[RequestBatchInstance],
        stats: ModelStats,
        policy: SchedulingPolicy | None = None,
    ) -> None:
        super().__init__(name, instances, stats, policy)
        self._runners = {instance.spec.name: instance for instance in instances}

    def _compute_batch(self, instance: Instance, batch: list[Pending], nbytes: int) -> list[Outputs | BaseException]:
        started = time.perf_counter_ns()
        runner = self._runners[instance.spec.name]
        executions = [p.execution for p in batch]
        inputs, outputs = [e.inputs for e in executions], [e.outputs for e in executions]
        sinks = [e.sink for e in executions]
        parameters = [model_parameters(e.parameters or {}) for e in executions]
        # a decoupled model's responses go to the sinks; other models' runners take no sinks
        answers = runner.compute_requests(inputs, outputs, sinks if any(sinks) else None, parameters)
        results: list[Outputs | BaseException] = list(answers)
        infer_ns = time.perf_counter_ns() - started
        for pending in batch:
            pending.compute_ns = (0, infer_ns, 0)
        self.stats.record_execution(sum(p.batch_size for p in batch), len(batch), 0, infer_ns, 0)
        return results
