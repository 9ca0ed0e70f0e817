"""The one request path: resolve → check → pre-stages → validate → schedule → post-stages.

Every door comes through here: V2 infer (tensors or encoded images, REST or gRPC), ``/classify``,
``/detect`` and ``/embed``, a Python model's ``InferenceRequest.exec()`` (which is a V2 infer), and
every step of an ensemble or OCR model (``serve_step``, the ``StepPath`` those schedulers are
handed). So validation, tracing, the ``priority`` and ``timeout`` parameters, the statistics and the
reload retry hold on every path. The data plane adds what is protocol-level
around it (shared memory, the response cache, response encoding).

What can be refused without decoding (input names, requested outputs, ``priority`` and
``timeout``, too many images for one execution) is checked before any image is decoded, in the
front half, so an intake process refuses it as early; each execution's tensors are validated
against the config once pre-processed.

One request may need several executions: images beyond ``max_batch_size`` on the image endpoints,
or several images for a model that cannot batch. Each execution is validated, traced and queued
like a request of its own, and its post-stage runs on its whole batch, on the image pool unless
cheap (``PostStage.cheap``).

``FrontHalf`` is everything but the execution (pre-stages, executions, post-stages);
``RequestPath`` adds validating, tracing and scheduling each execution in this process. An intake
process runs the same front half with each execution handed to the model process
(``intake.front_half.HandoffPath``), so the stages exist once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..batches import execution_slices
from ..ensembles.step import StepRequest
from ..errors import InvalidArgument
from ..pipelines.device_pixels import DevicePixels
from ..pipelines.preprocess import ImageTransform
from ..pipelines.slices import ImageWork
from ..repository.model import ModelVersion
from ..response_streams import ResponseSink
from ..scheduling.interface import HOST, Answered, BatchAnswers, Execution, Memory, RequestTiming
from ..scheduling.scheduler import Unloading, batch_signature
from ..scheduling.timeline import Timeline
from ..types import ANSWER_PARAMETERS, InferenceRequest, Reserves
from ..workers import run_in
from .plain_plans import PlainPlan
from .stages import ImageTask, PostStage
from .stages.image_input import ImageInput
from .validation import (
    as_batch_of_one,
    check_before_decoding,
    check_requested_outputs,
    engine_output,
    int_parameter,
    validate_inputs,
)
from .working_memory import hold_working_memory, working_memory_counted

if TYPE_CHECKING:  # the model process's; an intake runs only the FrontHalf and does not import it
    from ..repository.manager import ModelManager

Outputs = dict[str, np.ndarray]


class Traced(Protocol):
    """A request chosen for tracing: the scheduler fills its timeline."""

    @property
    def timeline(self) -> Timeline: ...


class Tracing(Protocol):
    """Where traced requests go (the trace extension's ``RequestTracing``)."""

    def start(self, model: str, request_id: str) -> Traced | None: ...

    def finish(self, handle: Any, version: str, error: str = "") -> None: ...

    @property
    def any_on(self) -> bool: ...


@dataclass(slots=True)
class Part:
    """One execution's outputs (config dims), its images' transforms, and its post-stage's result."""

    outputs: Outputs
    transforms: list[ImageTransform]
    batch_size: int
    post: Any = None


@dataclass(slots=True)
class Executed:
    """What a request's executions returned, and the version that served the last of them (a
    reload may have handed the request to the version that replaced the one resolved)."""

    model: ModelVersion
    parts: list[Part]

    def tensors(self, names: Sequence[str] | None = None) -> tuple[Outputs, int]:
        """The outputs (``names``, default all) joined along the image axis, with the batch size
        (the executions' images when there were several: one each for a model that cannot batch)."""
        if len(self.parts) == 1:
            return self.parts[0].outputs, self.parts[0].batch_size
        wanted = self.parts[0].outputs if names is None else names
        joined = {name: _joined(name, [p.outputs[name] for p in self.parts]) for name in wanted}
        return joined, sum(part.batch_size for part in self.parts)

    def post_tensors(self) -> Outputs:
        """The post-stages' tensors (one dict per execution) joined along the image axis."""
        if len(self.parts) == 1:
            return dict(self.parts[0].post)
        return {name: np.concatenate([p.post[name] for p in self.parts]) for name in self.parts[0].post}

    def results(self) -> list[Any]:
        """The post-stages' per-image results, in image order."""
        return [result for part in self.parts for result in part.post]


class FrontHalf(ABC):
    """Pre-stages → execute → post-stages, with the execution left to the subclass: the model
    process's ``RequestPath`` validates and schedules it; an intake process hands it to the model
    process (``intake.front_half.HandoffPath``). Pre- and post-stages use ``pool``."""

    def __init__(self, pool: Executor, image_share: int, work: ImageWork | None = None) -> None:
        self.pool = pool
        self.image_work = work or ImageWork()  # what the pool holds and did, for the metrics
        self.image_input = ImageInput(pool, image_share, self.image_work)

    async def serve(
        self,
        model: ModelVersion,
        request: InferenceRequest,
        names: list[str],
        post: PostStage | None = None,
        split: bool = False,
        sink: ResponseSink | None = None,
    ) -> Executed:
        """Serve ``request`` on ``model`` for outputs ``names``, then ``post`` on each execution.

        ``split``: images beyond ``max_batch_size`` become several executions (the image
        endpoints); otherwise that is the caller's error (V2 infer). ``sink``: a decoupled model's
        responses go there (tensors only); the outputs returned are then empty.
        """
        if sink is not None or (post is None and not split and not self.image_input.applies(model, request)):
            served, outputs, batch_size = await self._schedule(model, request, names, sink)
            return Executed(served, [Part(outputs, [], batch_size)])
        executions, transforms, decoded = await self.pre_stages(model, request, split)
        # A model that cannot batch gets an image axis on each execution's outputs where the
        # images are joined or handed to a post-stage (a declared leading 1 already is that axis).
        image_axis = decoded and model.max_batch_size == 0 and (len(executions) > 1 or post is not None)
        parts = []
        for images, one in executions:
            model, outputs, batch_size = await self._schedule(model, one, names)
            if image_axis:
                outputs = {name: as_batch_of_one(array) for name, array in outputs.items()}
            part = Part(outputs, transforms[images], batch_size)
            if post is not None and post.cheap:
                part.post = post(part.outputs, part.transforms)
            elif post is not None:
                part.post = await run_in(self.pool, post, part.outputs, part.transforms)
            parts.append(part)
        return Executed(model, parts)

    async def serve_image_task(self, model: ModelVersion, stage: ImageTask, request: InferenceRequest) -> list[Any]:
        """``/classify``, ``/detect``, ``/embed``: the images in ``request`` (``stage.request``) through
        the pre-stages, as many executions as the model's batch size needs, and ``stage`` on each."""
        executed = await self.serve(model, request, stage.outputs, post=stage, split=True)
        return executed.results()

    # --- pre-stages -------------------------------------------------------------------------------

    async def pre_stages(
        self, model: ModelVersion, request: InferenceRequest, split: bool
    ) -> tuple[list[tuple[slice, InferenceRequest]], list[ImageTransform], bool]:
        """The request's executions (which images each holds, and its request), the images'
        transforms, and whether encoded images were decoded into the model's input."""
        if not self.image_input.applies(model, request):
            return self._split(model, request) if split else [(slice(0, 0), request)], [], False
        pipeline = model.pipeline
        assert pipeline is not None and pipeline.spec is not None
        try:
            check_before_decoding(model, request)  # a refusal costs no decoding
            prepared = await self.image_input(model, request, whole=not split)
        except InvalidArgument:
            record_invalid(model)
            raise
        executions = with_preprocessed_input(
            request, pipeline.input_name, pipeline.spec.datatype, pipeline.executions(prepared.batch)
        )
        return executions, prepared.transforms, True

    @staticmethod
    def _split(model: ModelVersion, request: InferenceRequest) -> list[tuple[slice, InferenceRequest]]:
        """A batched request beyond ``max_batch_size`` as executions of at most that many items."""
        limit = model.max_batch_size
        items = min((array.shape[0] for array in request.inputs.values() if array.ndim), default=0)
        if limit <= 0 or items <= limit:
            return [(slice(0, 0), request)]
        return [
            (slice(0, 0), dataclasses.replace(request, inputs={name: a[one] for name, a in request.inputs.items()}))
            for one in execution_slices(items, limit)
        ]

    @abstractmethod
    async def _schedule(
        self, model: ModelVersion, request: InferenceRequest, names: Sequence[str], sink: ResponseSink | None = None
    ) -> tuple[ModelVersion, Outputs, int]:
        """Run one execution: the version that ran it, its outputs in the config's dims, the batch size."""


class RequestPath(FrontHalf):
    """Runs requests on the models of ``manager``: each execution validated, traced and queued on
    the model's scheduler."""

    def __init__(
        self, manager: ModelManager, tracing: Tracing, pool: Executor, image_share: int, max_variable_elements: int = 0
    ) -> None:
        super().__init__(pool, image_share)
        self.manager = manager
        self.tracing = tracing
        self.max_variable_elements = max_variable_elements  # per item of a -1 input (0: none)
        manager.step_path = self.serve_step  # composite models' steps come back through here

    def resolve(self, name: str, version: str = "") -> ModelVersion:
        return self.manager.get(name, version)

    async def serve_step(self, step: StepRequest) -> Outputs:
        """One step of an ensemble or OCR model, as a request of its own to the model the composite
        resolved: split into executions of the step model's ``max_batch_size`` (one chunking for
        every path), each validated, traced, queued and retried once on a replaced version. The
        composite request's parameters go with it (a Python step reads them). Outputs in the
        config's dims, the executions' joined along the batch."""
        model = step.model
        assert isinstance(model, ModelVersion), "composite steps are versions the model manager resolved"
        composite = step.composite
        parameters = {**(composite.parameters or {}), "priority": composite.priority, "timeout": composite.timeout_us}
        request = InferenceRequest(
            model.name,
            step.version,
            inputs=step.inputs,
            parameters={key: value for key, value in parameters.items() if value is not None},
            ticket=composite.ticket,
            preprocessed=step.preprocessed,
        )
        if step.sink is not None or model.max_batch_size <= 0:
            return (await self._schedule(model, request, step.outputs, step.sink, timing=step.timing))[1]
        executions = self._split(model, request)
        if len(executions) == 1:
            return (await self._schedule(model, request, step.outputs, timing=step.timing))[1]
        parts = await asyncio.gather(
            *(self._schedule(model, one, step.outputs, timing=step.timing) for _, one in executions)
        )
        outputs = [part[1] for part in parts]
        given = [name for name in step.outputs if all(name in part for part in outputs)]  # a Python step may omit one
        return {name: np.concatenate([part[name] for part in outputs]) for name in given}

    # --- validate and schedule --------------------------------------------------------------------

    async def _schedule(
        self,
        model: ModelVersion,
        request: InferenceRequest,
        names: Sequence[str],
        sink: ResponseSink | None = None,
        *,
        timing: RequestTiming | None = None,
    ) -> tuple[ModelVersion, Outputs, int]:
        """Validate one execution, queue it on the model's scheduler (traced) and return its
        outputs in the config's dims, with the version that ran it and the batch size. ``timing``
        sums a composite model's time in its steps."""
        execution, trace = self._execution(model, request, names, sink, timing)
        try:
            with working_memory_counted(model, execution.inputs, request.ticket):
                try:
                    served = model
                    results = await model.scheduler.submit(execution)
                except Unloading as exc:
                    served = self._replacement(model, request.model_version, exc)
                    results = await served.scheduler.submit(execution)
        except Exception as exc:
            self._trace_failed(trace, model, exc)
            raise
        if trace:
            self.tracing.finish(trace, str(served.version))
        return served, _config_outputs(model, results, execution.batch_size), execution.batch_size

    def schedule_now(
        self, model: ModelVersion, request: InferenceRequest, names: Sequence[str], answer: Answer
    ) -> asyncio.Future[Outputs]:
        """``_schedule`` with no coroutine per request, for a caller holding many (the intake
        hand-off): the same validation, tracing, working memory and reload retry, the execution
        queued now. ``answer`` receives ``(served, outputs, batch size)`` as ``_schedule`` returns
        them, or the error (``CancelledError`` when the returned future was cancelled, which
        cancels the execution). Errors found before queueing are raised."""
        execution, trace = self._execution(model, request, names, None, None)
        release: Callable[[], None] | None = None
        try:
            release = hold_working_memory(model, execution.inputs, request.ticket)
            served = model
            try:
                future = model.scheduler.enqueue(execution)
            except Unloading as exc:
                served = self._replacement(model, request.model_version, exc)
                future = served.scheduler.enqueue(execution)
        except Exception as exc:
            if release is not None:
                release()
            self._trace_failed(trace, model, exc)
            raise

        def settled(future: asyncio.Future[Outputs]) -> None:
            if release is not None:
                release()
            if future.cancelled():
                answer(asyncio.CancelledError())
                return
            error = future.exception()
            if error is not None:
                if isinstance(error, Exception):
                    self._trace_failed(trace, model, error)
                answer(error)
                return
            if trace:
                self.tracing.finish(trace, str(served.version))
            answer((served, _config_outputs(model, future.result(), execution.batch_size), execution.batch_size))

        future.add_done_callback(settled)
        return future

    def plan(self, model: ModelVersion, request: InferenceRequest, names: Sequence[str]) -> PlainPlan | None:
        """The plan for requests like ``request`` (``plain_plans``): its one execution validated as
        ``_execution`` validates it (an invalid request raises, and counts, as there), or None when
        such requests need more than a plan holds: parameters, an input the config reshapes, working
        memory to count, a scheduler that does not answer batches. Parameters that say how the answer
        is encoded (``ANSWER_PARAMETERS``) are the plan's own (part of its signature). The caller has checked the rest
        (``DataPlane.plan``)."""
        if self.tracing.any_on or not request.parameters.keys() <= ANSWER_PARAMETERS:
            return None
        if not model.scheduler.answers_batches or model.working_memory_factor:
            return None
        if any(model.inputs[name].reshape is not None for name in request.inputs if name in model.inputs):
            return None
        execution, _ = self._execution(model, request, names, None, None)  # no trace: only planned while off
        if execution.memory is not HOST:
            return None
        requested = {o.name: o.binary for o in request.outputs or ()}
        binary_default = request.binary_output_default
        answers = tuple(
            (
                name,
                model.outputs[name].datatype,
                bool(binary_default if requested.get(name) is None else requested[name]),
            )
            for name in names
        )
        signature = batch_signature(execution.inputs, model.max_batch_size > 0)
        return PlainPlan(
            model,
            str(model.version),
            list(names),
            execution.batch_size,
            signature,
            answers,
            bool(request.outputs),
            dict(request.parameters),
        )

    def queue_planned(
        self, plan: PlainPlan, inputs: Outputs, ticket: Reserves | None, answers: BatchAnswers, tag: Any
    ) -> Answered | None:
        """Queue one request of ``plan``'s signature (its ``inputs`` as the plan's request had them),
        answered with its batch's to ``answers``; None when it must take the whole path instead:
        a trace setting is on (each request is then sampled), or the plan's version no longer takes
        requests (the reload retry is the whole path's)."""
        if self.tracing.any_on:
            return None
        execution = Execution(inputs, plan.names, plan.batch_size, parameters=plan.parameters, ticket=ticket)
        try:
            return plan.model.scheduler.enqueue_answered(execution, answers, tag, plan.signature)
        except Unloading:
            return None

    def _execution(
        self,
        model: ModelVersion,
        request: InferenceRequest,
        names: Sequence[str],
        sink: ResponseSink | None,
        timing: RequestTiming | None,
    ) -> tuple[Execution, Any]:
        """One validated execution of ``request`` and its trace (None: not traced)."""
        try:
            inputs, batch_size = validate_inputs(model, request, self.max_variable_elements)
            check_requested_outputs(model, request)
            priority = int_parameter(request, "priority")
            timeout_us = int_parameter(request, "timeout")
        except InvalidArgument:
            record_invalid(model)
            raise
        trace = self.tracing.start(model.name, request.id)
        timeline = trace.timeline if trace else None
        # only inputs the server made itself (a device pre-processor's) or a view of a client's CUDA
        # region may be device tensors
        memory = _memory_of(inputs) if request.preprocessed or request.device_inputs else HOST
        execution = Execution(
            inputs,
            list(names),
            batch_size,
            priority,
            timeout_us,
            timeline,
            timing,
            sink,
            request.parameters,
            request.ticket,
            memory,
            request.device_outputs,
        )
        return execution, trace

    def _replacement(self, model: ModelVersion, version: str, unloading: Unloading) -> ModelVersion:
        """The version that replaced ``model`` since it was looked up (while images decoded, say),
        so reloads drop nothing; ``unloading`` again when none did."""
        served = self.manager.get(model.name, version)  # raises when none serves
        if served is model:
            raise unloading
        return served

    def _trace_failed(self, trace: Any, model: ModelVersion, exc: Exception) -> None:
        if trace:
            self.tracing.finish(trace, str(model.version), error=str(exc) or type(exc).__name__)


def with_preprocessed_input(
    request: InferenceRequest, name: str, datatype: str, tensors: Sequence[tuple[slice, Any]]
) -> list[tuple[slice, InferenceRequest]]:
    """One request per execution, each carrying its pre-processed ``name`` tensor (marked so:
    validation and the model process know the server made it, not the client)."""
    datatypes = {**request.input_datatypes, name: datatype}
    return [
        (
            images,
            dataclasses.replace(
                request,
                inputs={**request.inputs, name: tensor},
                input_datatypes=datatypes,
                preprocessed=frozenset({name}),
            ),
        )
        for images, tensor in tensors
    ]


Scheduled = tuple[ModelVersion, Outputs, int]
#: What ``RequestPath.schedule_now`` hands its caller: the execution's outcome or its error.
Answer = Callable[[Scheduled | BaseException], None]


def _config_outputs(model: ModelVersion, results: Outputs, batch_size: int) -> Outputs:
    """An execution's outputs in the config's dims."""
    batched = model.max_batch_size > 0
    return {k: engine_output(model.outputs[k], v, batch_size, batched) for k, v in results.items()}


def _joined(name: str, arrays: list[np.ndarray]) -> np.ndarray:
    """One output of several executions along the image axis; images of a variable-size input
    whose outputs differ in shape cannot be joined (ask for a decoded output, or one image per request)."""
    shapes = {array.shape[1:] for array in arrays}
    if len(shapes) > 1:
        raise InvalidArgument(
            f"output '{name}' has a different shape for images of different sizes "
            f"({', '.join(str(list(s)) for s in sorted(shapes))}): send one image per request, or ask for "
            "the decoded outputs"
        )
    return np.concatenate(arrays)


def _memory_of(inputs: Outputs) -> Memory:
    """Where pre-processed inputs live: numpy arrays, decoded pixels the batcher pre-processes on the
    device (``DevicePixels``), else device tensors."""
    if all(isinstance(array, np.ndarray) for array in inputs.values()):
        return HOST
    if any(isinstance(array, DevicePixels) for array in inputs.values()):
        return Memory.PIXELS
    return Memory.DEVICE


def record_invalid(model: ModelVersion) -> None:
    """A request refused as invalid counts as a failure of the model it was for (as Triton)."""
    model.stats.record_failure(0, "OTHER")
