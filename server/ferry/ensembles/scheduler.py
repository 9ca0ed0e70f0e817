"""Runs ensemble requests: each step as a request of its own through the request path, tensors in memory.

Steps run in waves (see ``plan``): the steps of one wave are independent and run at once. The
composing models are resolved once per request; each step's request goes to the ``StepPath``
(the request path: validated, traced, split to the step model's batch size, queued like any client
request, retried once on a replaced version), so the same step of many concurrent ensemble requests
shares that model's batches. Arrays go from one step to the next as they are (numpy views, no
serialisation). A failure names the ensemble and the step.
"""

from __future__ import annotations

import asyncio
import time
import weakref

import numpy as np

from ferry_client.codec import numpy_dtype

from ..errors import FerryError, ModelLoadError, Unavailable
from ..response_streams import ResponseSink, StreamedResponse
from ..scheduling.interface import ComposingScheduler, Execution, RequestTiming
from ..statistics import ModelStats
from ..types import TensorSpec
from .compose import check_composition
from .plan import EnsemblePlan, PrunedPlan, Step
from .step import ComposingModels, StepModel, StepRequest

Outputs = dict[str, np.ndarray]


class EnsembleScheduler(ComposingScheduler):
    """The scheduler of an ensemble's model version: each request through every step."""

    def __init__(
        self,
        plan: EnsemblePlan,
        inputs: dict[str, TensorSpec],
        outputs: dict[str, TensorSpec],
        max_batch_size: int,
        models: ComposingModels,
        stats: ModelStats,
    ) -> None:
        super().__init__(plan.name, stats)
        self.plan = plan
        self.inputs = inputs
        self.outputs = outputs
        self.max_batch_size = max_batch_size
        self._models = models
        self._checked: list[weakref.ref] = []
        #: one pruned plan per set of requested outputs (at most 2^outputs, all ensemble outputs)
        self._pruned: dict[frozenset[str], PrunedPlan] = {}

    # --- composing models ---------------------------------------------------------------------

    def resolve_steps(self) -> dict[int, StepModel]:
        """The READY composing model of every step, checked to fit (again when one was replaced)."""
        models: dict[int, StepModel] = {}
        for step in self.plan.steps:
            try:
                models[step.index] = self._models.get(step.model_name, step.version)
            except FerryError as exc:
                raise Unavailable(f"ensemble '{self.plan.name}' {step.label} is not ready: {exc.message}") from None
        current = list(models.values())
        if len(current) != len(self._checked) or any(
            ref() is not m for ref, m in zip(self._checked, current, strict=True)
        ):
            try:
                check_composition(self.plan, self.inputs, self.outputs, self.max_batch_size, models, "")
            except ModelLoadError as exc:
                raise Unavailable(
                    f"ensemble '{self.plan.name}' no longer fits its composing models{exc.message}"
                ) from None
            self._checked = [weakref.ref(m) for m in current]
        return models

    def check_ready(self) -> None:
        """Every composing model is ready and fits (``Unavailable`` naming the step otherwise)."""
        self.resolve_steps()

    # --- requests ---------------------------------------------------------------------------------

    async def submit(self, execution: Execution) -> Outputs:
        """Run one execution through every step and return the asked ensemble outputs. Each step
        takes the execution's priority, timeout, parameters and admission ticket.

        An ensemble whose last step is decoupled gets a ``sink``: the steps before run as usual,
        then each response of the last step goes to the sink under the ensemble's output names.

        A traced request's ``timeline`` spans all steps as one compute stage (each step's own
        queue and compute times are in the composing models' statistics)."""
        started = time.perf_counter_ns()
        spent = RequestTiming()
        tensors = await self.counted(self._serve(execution, spent), started)
        self.record_success(started, spent, execution.batch_size, execution.timeline, execution.timing)
        # a step may leave out an output (a Python model can): the caller decides if it was needed
        return {name: tensors[name] for name in execution.outputs if name in tensors}

    async def _serve(self, execution: Execution, spent: RequestTiming) -> dict[str, np.ndarray]:
        models = self.resolve_steps()
        return await self._serve_waves(models, self._plan_for(execution.outputs), execution, spent)

    def _plan_for(self, outputs: list[str]) -> PrunedPlan:
        key = frozenset(outputs)
        pruned = self._pruned.get(key)
        if pruned is None:
            pruned = self._pruned[key] = self.plan.pruned(key)
        return pruned

    async def _serve_waves(
        self, models: dict[int, StepModel], plan: PrunedPlan, execution: Execution, timing: RequestTiming
    ) -> Outputs:
        tensors = dict(execution.inputs)
        sink = execution.sink
        for wave in plan.waves:
            if sink is not None:
                last = next((step for step in wave if models[step.index].decoupled), None)
                if last is not None:  # the loader made sure nothing comes after it
                    await self._stream_step(last, models[last.index], tensors, sink, execution, timing)
                    wave = tuple(step for step in wave if step is not last)
                    if not wave:
                        continue
            calls = [
                self._step(step, plan.step_outputs[step.index], models, tensors, execution, timing) for step in wave
            ]
            # a chain needs no task per step (the common case)
            results = [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls)
            for step, outputs in zip(wave, results, strict=True):
                for model_output, tensor in step.output_map.items():
                    if model_output in outputs:
                        tensors[tensor] = outputs[model_output]
        return tensors

    async def _stream_step(
        self,
        step: Step,
        model: StepModel,
        tensors: Outputs,
        sink: ResponseSink,
        execution: Execution,
        timing: RequestTiming,
    ) -> None:
        """The decoupled last step: its responses go straight to the ensemble's sink, renamed."""
        args = {model_input: tensors[tensor] for model_input, tensor in step.input_map.items()}
        renamed = RenamedStream(sink, step.output_map)
        request = StepRequest(model, step.version, args, list(step.output_map), execution, timing, renamed)
        try:
            await self._models.step_path(request)
        except FerryError as exc:
            raise FerryError(f"ensemble '{self.plan.name}' {step.label}: {exc.message}", exc.kind) from None

    async def _step(
        self,
        step: Step,
        names: list[str],
        models: dict[int, StepModel],
        tensors: Outputs,
        execution: Execution,
        timing: RequestTiming,
    ) -> Outputs:
        args = {}
        for model_input, tensor in step.input_map.items():
            if tensor not in tensors:
                writer = next((s for s in self.plan.steps if tensor in s.output_map.values()), None)
                raise FerryError(
                    f"ensemble '{self.plan.name}' {step.label}: input '{model_input}' reads ensemble tensor "
                    f"'{tensor}', which {writer.label if writer else 'no step'} did not produce"
                )
            args[model_input] = tensors[tensor]
        return await self._serve_step(step, models[step.index], args, names, execution, timing)

    async def _serve_step(
        self,
        step: Step,
        model: StepModel,
        args: Outputs,
        names: list[str],
        execution: Execution,
        timing: RequestTiming,
    ) -> Outputs:
        """One step's request through the request path (which splits it to the model's batch size)."""
        try:
            if model.max_batch_size > 0 and args and all(a.ndim and not len(a) for a in args.values()):
                return {name: _empty(model.outputs[name]) for name in names}
            return await self._models.step_path(StepRequest(model, step.version, args, names, execution, timing))
        except FerryError as exc:
            message = f"ensemble '{self.plan.name}' {step.label}: {exc.message}"
            if isinstance(exc, Unavailable):
                raise Unavailable(message, retry_after=exc.retry_after) from None
            raise FerryError(message, exc.kind) from None
        except Exception as exc:  # an engine's own error: still say which step it came from
            raise FerryError(f"ensemble '{self.plan.name}' {step.label} failed: {exc}") from exc


def _empty(spec: TensorSpec) -> np.ndarray:
    """An output with no items (a batch of zero detections), typed as the config declares."""
    return np.empty((0, *(max(d, 0) for d in spec.dims)), dtype=numpy_dtype(spec.datatype))


class RenamedStream:
    """A step's view of the ensemble's response stream: its output names become the ensemble's."""

    def __init__(self, target: ResponseSink, output_map: dict[str, str]) -> None:
        self._target = target
        self._names = output_map

    @property
    def cancelled(self) -> bool:
        return self._target.cancelled

    @property
    def finished(self) -> bool:
        return self._target.finished

    @property
    def responses(self) -> int:
        return self._target.responses

    def put(self, response: StreamedResponse) -> bool:
        outputs = {self._names[name]: array for name, array in response.outputs.items() if name in self._names}
        return self._target.put(StreamedResponse(outputs, response.error, response.final, response.sent_ns))
