"""The protocol-neutral data plane: health, metadata, inference, repository and statistics.

REST and gRPC handlers only translate their wire formats to and from the types used here, so
every check and every error message exists once and both protocols behave the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

import numpy as np

from ferry_client.codec import CodecError, tensor_from_bytes, tensor_to_bytes
from ferry_client.protocol import model_config_pb2 as mc

from .. import __version__
from ..caching import ResponseCache, entry_size, images_key, request_key
from ..errors import ErrorKind, FerryError, InvalidArgument, Unavailable, Unimplemented
from ..inference.path import RequestPath, Scheduled
from ..inference.plain_plans import PlainPlan
from ..inference.stages import PostStage
from ..inference.stages.detection_tensors import DetectionTensors
from ..inference.stages.embed import EmbeddingTensors
from ..inference.stages.recognize import RecognitionTensors
from ..inference.stages.tasks import check_image_request, image_task
from ..inference.validation import engine_output, int_parameter
from ..pipelines.postprocess import classification_strings
from ..repository.manager import ModelManager
from ..repository.model import ModelVersion
from ..response_pacing import MOST_PER_TURN, ResponsePacer
from ..response_streams import ResponseStream
from ..scheduling.interface import Answered, BatchAnswers
from ..security.identity import Identify, anonymous
from ..types import InferenceRequest, InferenceResponse, OutputTensor, Reserves, TensorSpec
from ..workers import run_in
from .admission import Admission, Ticket
from .limits import OFF_LOOP_BYTES, Limits
from .logging_ext import LoggingControl
from .ocr_pages import read_pages
from .received_body import HeapBody
from .shared_memory import SharedMemoryRegistry, check_input_size, ref_parameters, shared_regions
from .stream_limits import StreamLimits
from .trace_ext import RequestTracing

T = TypeVar("T")
log = logging.getLogger(__name__)

EXTENSIONS = [
    "binary_tensor_data",
    "classification",
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "statistics",
    "schedule_policy",
    "system_shared_memory",
    "logging",
    "trace",
]


class DataPlane:
    """What the server does, independent of how the request arrived."""

    def __init__(
        self,
        manager: ModelManager,
        admission: Admission | None = None,
        limits: Limits | None = None,
        cache: ResponseCache | None = None,
        tracing: RequestTracing | None = None,
        logging_control: LoggingControl | None = None,
        shared_memory: SharedMemoryRegistry | None = None,
        identify: Identify = anonymous,
        strict_readiness: bool = False,
        stream_limits: StreamLimits | None = None,
        max_streamed_requests: int = 0,
        streamed_responses_per_turn: int = MOST_PER_TURN,
    ) -> None:
        self.manager = manager
        self.stream_limits = stream_limits or StreamLimits()  # per gRPC stream and client address
        self.max_streamed_requests = max_streamed_requests  # open decoupled requests, server-wide (0: no cap)
        self.strict_readiness = strict_readiness
        self.cache = cache
        self.tracing = tracing or RequestTracing()
        self.logging = logging_control  # None: the logging extension answers UNIMPLEMENTED
        self.admission = admission or Admission()
        self.limits = limits or Limits()
        self.shared_memory = shared_memory or SharedMemoryRegistry(enabled=False)
        self.identify = identify  # who a caller is, from its Authorization value (security/identity.py)
        self.started = False
        self.draining = False
        self.open_streams: set[ResponseStream] = set()  # decoupled requests not yet final
        # their responses' turns of the event loop: other requests go first
        self.response_pacer = ResponsePacer(most=streamed_responses_per_turn)
        self._streams_closed = asyncio.Event()
        self.workers = manager.workers  # the process's pools (``ferry.workers``)
        self.path = RequestPath(
            manager,
            self.tracing,
            self.workers.image,
            self.workers.image_share,
            max_variable_elements=self.limits.max_variable_elements,
        )
        self.image_work = self.path.image_work

    # --- health and metadata ----------------------------------------------------------------

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        """Serving; with strict readiness (Triton's --strict-readiness) also every named model READY."""
        if not self.started or self.draining:
            return False
        return not (self.strict_readiness and self.manager.unready_named_models())

    def readiness(self) -> dict[str, Any]:
        """The readiness answer's body: ``ready``, and when not, why (strict readiness: which models)."""
        if self.ready():
            return {"ready": True}
        if not self.started or self.draining:
            return {"ready": False, "reason": "shutting down" if self.draining else "starting"}
        unready = self.manager.unready_named_models()
        return {"ready": False, "reason": "models not READY (--strict-readiness)", "models_not_ready": unready}

    def server_metadata(self) -> dict[str, Any]:
        extensions = [e for e in EXTENSIONS if e != "system_shared_memory" or self.shared_memory.enabled]
        return {"name": "ferry", "version": __version__, "extensions": extensions}

    def model_ready(self, name: str, version: str = "") -> bool:
        return self.manager.is_ready(name, version)

    def model(self, name: str, version: str = "") -> ModelVersion:
        return self.manager.get(name, version)

    def receive_body(self, nbytes: int, json_bytes: int, ticket: Ticket) -> HeapBody:
        """A REST body's buffer: on the heap, in one process (``api/received_body.py``)."""
        return HeapBody(nbytes, ticket)

    def is_decoupled(self, name: str, version: str = "") -> bool:
        """Whether requests to this model stream (False when it cannot serve: its request says why)."""
        try:
            return self.manager.get(name, version).decoupled
        except FerryError:
            return False

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self.manager.get(name, version)
        versions = [row["version"] for row in self.manager.index(ready_only=True) if row["name"] == name]
        batched = model.max_batch_size > 0
        metadata: dict[str, Any] = {
            "name": model.name,
            "versions": versions,
            "platform": model.platform,
            "inputs": [_tensor_metadata(s, batched) for s in model.inputs.values()],
            "outputs": [_tensor_metadata(s, batched) for s in model.outputs.values()],
        }
        if model.pipeline is not None:  # decoded detections always have the image axis
            metadata["outputs"] += [_tensor_metadata(s, True) for s in model.pipeline.decoded_outputs.values()]
            metadata["parameters"] = _image_input_metadata(model)
        return metadata

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return self.manager.get(name, version).config

    # --- inference ------------------------------------------------------------------------------

    async def infer(self, request: InferenceRequest, door: str = "HTTP end point") -> InferenceResponse:
        """V2 infer (REST, gRPC, a Python model's ``exec()``): the request path, then one response.
        A decoupled model answers through ``infer_stream`` only: this refuses it with Triton's words,
        naming the ``door`` (the front door's endpoint)."""
        model = self.path.resolve(request.model_name, request.model_version)
        if model.decoupled:
            raise Unimplemented(f"{door} doesn't support models with decoupled transaction policy")
        regions = shared_regions(request)
        if not regions:
            return await self._infer(model, request)
        release = self.shared_memory.hold(request.client, regions)  # an unregister meanwhile waits for it
        try:
            on_device = self._on_device(model)
            await self._read_shared_memory(request, on_device)
            if on_device:
                request.device_outputs = self._device_outputs(request)
            return await self._infer(model, request)
        finally:
            release()

    def infer_soon(
        self, request: InferenceRequest, answer: Callable[[InferenceResponse | BaseException], None]
    ) -> asyncio.Future | None:
        """``infer`` with no coroutine per request, for a caller holding many (the intake hand-off's
        batch of ``Infer`` messages), when the request is one plain execution: tensors in host
        memory for a model that is not decoupled, with no response cache, and no image stage or
        decoded output for it, no output asked into shared memory. The path is the same
        (``RequestPath.schedule_now``); ``answer`` receives the response or the error. Returns the
        execution's future (cancelling it cancels the request), or None when the request needs
        more than that (then ``infer`` serves it). Errors found before queueing are raised."""
        model = self.path.resolve(request.model_name, request.model_version)
        names = self._plain_outputs(model, request)
        if names is None:
            return None

        def respond(outcome: Scheduled | BaseException) -> None:
            if isinstance(outcome, BaseException):
                answer(outcome)
                return
            _, outputs, batch_size = outcome
            try:
                response = self._tensors(model, request, names, outputs, batch_size)
            except Exception as exc:
                answer(exc)
                return
            answer(response)

        return self.path.schedule_now(model, request, names, respond)

    def plan(self, request: InferenceRequest, expect: str | None) -> PlainPlan | None:
        """The plan for handed-off requests like ``request`` (``inference.plain_plans``), pre-processed
        for load ``expect`` (None: any), or None when they are not one plain execution (see
        ``infer_soon``), need more than a plan holds (``RequestPath.plan``), or were pre-processed
        for another load. Errors found on the way (an unknown model, an invalid request) raise."""
        model = self.path.resolve(request.model_name, request.model_version)
        if expect is not None and model.identity != expect:
            return None
        names = self._plain_outputs(model, request)
        if names is None or any(o.classification for o in request.outputs or ()):
            return None
        return self.path.plan(model, request, names)

    def current(self, plan: PlainPlan, name: str, version: str) -> bool:
        """Whether ``plan``'s load still serves ``name`` and ``version`` as asked."""
        try:
            return self.path.resolve(name, version) is plan.model
        except FerryError:
            return False

    def queue_planned(
        self, plan: PlainPlan, inputs: dict[str, np.ndarray], ticket: Ticket | None, answers: BatchAnswers, tag: Any
    ) -> Answered | None:
        """``RequestPath.queue_planned``: one request of ``plan``'s signature queued, else None."""
        return self.path.queue_planned(plan, inputs, ticket, answers, tag)

    def _plain_outputs(self, model: ModelVersion, request: InferenceRequest) -> list[str] | None:
        """The outputs a request answers with, when it is one plain execution of ``model`` (tensors
        in host memory, a model that is not decoupled, no response cache, no image stage or decoded
        output, no output asked into shared memory); else None."""
        requested = request.outputs if request.outputs else None
        if (
            model.decoupled
            or request.shared_memory_inputs
            or self._cache_for(model) is not None
            or any(o.shared_memory is not None for o in requested or ())
            or self.path.image_input.applies(model, request)
        ):
            return None
        names = [o.name for o in requested] if requested is not None else list(model.outputs)
        if model.pipeline is not None and any(name in model.pipeline.decoded_outputs for name in names):
            return None
        return names

    async def _infer(self, model: ModelVersion, request: InferenceRequest) -> InferenceResponse:
        requested = request.outputs if request.outputs else None
        names = [o.name for o in requested] if requested is not None else list(model.outputs)
        cache = self._cache_for(model)
        if cache is None:
            results, batch_size = await self._execute(model, request, names)
        else:
            for key in ("priority", "timeout"):  # not part of the key, but a hit must not accept bad values
                int_parameter(request, key)
            results, batch_size = await self._cached(
                model,
                cache,
                request_key(self._cache_identity(model), request),
                lambda: self._execute(model, request, names),
            )
        return await self._response(model, request, names, results, batch_size)

    async def infer_stream(
        self, request: InferenceRequest
    ) -> AsyncGenerator[tuple[InferenceResponse | FerryError, bool], None]:
        """Every response to one request, each with whether it is the final one.

        A model that is not decoupled gives its one response, final. A decoupled model's responses
        come as it sends them; an error it sends mid-stream is yielded (the stream goes on unless it
        was final). Leaving the iteration early cancels the request (the model sees
        ``is_cancelled()``); the server's shutdown ends streams still open past its drain time."""
        model = self.manager.get(request.model_name, request.model_version)
        if not model.decoupled:
            yield await self.infer(request), True
            return
        cap = self.max_streamed_requests
        if cap and len(self.open_streams) >= cap:
            self.stream_limits.rejected += 1
            raise FerryError(
                f"server overloaded: {len(self.open_streams)} requests to decoupled models are open (limit {cap}, "
                "--max-streamed-requests); retry later",
                ErrorKind.RESOURCE_EXHAUSTED,
            )
        requested = request.outputs if request.outputs else None
        names = [o.name for o in requested] if requested is not None else list(model.outputs)
        release = self.shared_memory.hold(request.client, shared_regions(request))
        stream = ResponseStream(asyncio.get_running_loop(), pacer=self.response_pacer)
        self.open_streams.add(stream)
        sent, last = 0, time.perf_counter_ns()
        final = False
        try:
            if request.shared_memory_inputs:
                await self._read_shared_memory(request)
            _, batch_size = (await self.path.serve(model, request, names, sink=stream)).tensors()
            async for item in stream:
                final = item.final
                answer: InferenceResponse | FerryError
                if item.error is not None:
                    answer = item.error
                else:
                    batched = model.max_batch_size > 0
                    outputs = {
                        k: engine_output(model.outputs[k], v, batch_size, batched)
                        for k, v in item.outputs.items()
                        if k in model.outputs
                    }
                    answer = await self._response(model, request, names, outputs, batch_size, streamed=True)
                if model.stats is not None:
                    now = time.perf_counter_ns()
                    outcome = "fail" if item.error else "success" if item.outputs else "empty_response"
                    # a response sent while the one before was still being answered computed for 0 ns
                    model.stats.record_response(sent, outcome, max(0, item.sent_ns - last), now - item.sent_ns)
                    sent, last = sent + 1, now
                yield answer, item.final
        finally:
            if not final and sent and model.stats is not None:  # the client went away mid-stream
                model.stats.record_response(sent, "cancel", time.perf_counter_ns() - last)
            release()
            stream.cancel()
            self.open_streams.discard(stream)
            if not self.open_streams:
                self._streams_closed.set()

    async def end_streams(self, timeout: float) -> int:
        """Shutdown: wait up to ``timeout`` for open decoupled requests to finish, then end the rest
        with an error (their clients get it as the last response). Returns how many were ended."""
        self._streams_closed.clear()
        if self.open_streams:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._streams_closed.wait(), timeout)
        ended = list(self.open_streams)
        for stream in ended:
            stream.fail(Unavailable("the server is shutting down: the stream ended before its final response"))
        return len(ended)

    async def _response(
        self,
        model: ModelVersion,
        request: InferenceRequest,
        names: list[str],
        results: dict[str, np.ndarray],
        batch_size: int,
        streamed: bool = False,
    ) -> InferenceResponse:
        """The response holding ``results`` (``_tensors``), outputs asked into shared memory written there."""
        response = self._tensors(model, request, names, results, batch_size, streamed)
        shared = {o.name: o.shared_memory for o in request.outputs or () if o.shared_memory is not None}
        for output in response.outputs:
            if output.name in shared:
                # an output kept on the device (``request.device_outputs``) is written from there
                data: Any = output.data
                if isinstance(data, np.ndarray):
                    data = tensor_to_bytes(data, output.datatype)
                    nbytes = memoryview(data).nbytes
                else:
                    nbytes = data.nbytes
                write = functools.partial(
                    self.shared_memory.write, request.client, shared[output.name], output.name, data
                )
                written = write() if nbytes < OFF_LOOP_BYTES else await run_in(self.workers.codec, write)
                output.shared_memory = ref_parameters(shared[output.name], written)
        return response

    def _tensors(
        self,
        model: ModelVersion,
        request: InferenceRequest,
        names: list[str],
        results: dict[str, np.ndarray],
        batch_size: int,
        streamed: bool = False,
    ) -> InferenceResponse:
        """The response holding ``results``: a streamed response may carry only some outputs."""
        requested = request.outputs if request.outputs else None
        binary_default = request.binary_output_default
        binary = {o.name: o.binary for o in requested} if requested is not None else {}
        classify = {o.name: o.classification for o in requested or () if o.classification}
        outputs = []
        has_image_axis = model.max_batch_size > 0 or batch_size > 1  # see _execute
        decoded = model.pipeline.decoded_outputs if model.pipeline is not None else {}
        for name in names:
            spec = model.outputs[name] if name in model.outputs else decoded[name]
            array = results.get(name)
            if array is None:  # a Python model (or an ensemble's step) may leave an output out
                if requested is None or streamed:
                    continue
                if model.platform == "ensemble":  # Triton answers with the outputs that exist
                    log.warning(
                        "ensemble '%s': no step produced output '%s', which request '%s' asked for; "
                        "answering without it",
                        model.name,
                        name,
                        request.id,
                    )
                    continue
                raise FerryError(f"model '{model.name}' returned no output '{name}', which the request asked for")
            flag = binary.get(name)
            datatype = spec.datatype
            if name in classify:
                array = classification_tensor(array, classify[name], model.labels.get(name), has_image_axis)
                datatype = "BYTES"
            outputs.append(OutputTensor(name, datatype, array, binary_default if flag is None else flag))
        return InferenceResponse(model.name, str(model.version), request.id, outputs)

    async def _execute(
        self, model: ModelVersion, request: InferenceRequest, names: list[str]
    ) -> tuple[dict[str, np.ndarray], int]:
        """The request path for V2 infer: outputs in the config's dims, with the batch size.

        A model that cannot batch runs one execution per encoded image: then the outputs are
        stacked along a leading image axis and the batch size is the number of images (only then
        above 1). Decoded detections (``pipeline.decoded_outputs``) need encoded images: the raw
        outputs the decoder reads run too, and a post-stage maps the detections to each image's pixels.
        ``EMBEDDING``, ``TEXT`` and ``TEXT_SCORE`` are post-stages too, on encoded images or tensors alike.
        """
        pipeline = model.pipeline
        decoded = [name for name in names if name in pipeline.decoded_outputs] if pipeline is not None else []
        if not decoded:
            executed = await self.path.serve(model, request, names)
            return executed.tensors()
        assert pipeline is not None
        post: PostStage
        if pipeline.embedding is not None:
            post = EmbeddingTensors(pipeline)  # pooling needs no original image size: tensors do too
        elif pipeline.text_recognition is not None:
            post = RecognitionTensors(pipeline)  # nor does CTC decoding
        elif not self.path.image_input.applies(model, request):
            model.stats.record_failure(0, "OTHER")
            raise InvalidArgument(
                f"outputs {', '.join(decoded)} of model '{model.name}' need encoded images (BYTES) in input "
                f"'{pipeline.input_name}': the original size of images sent as tensors is unknown"
            )
        else:
            post = DetectionTensors(pipeline)
        raw = list(dict.fromkeys([n for n in names if n not in decoded] + pipeline.output_names))
        request = dataclasses.replace(request, outputs=[o for o in request.outputs or () if o.name not in decoded])
        executed = await self.path.serve(model, request, raw, post=post)
        results, batch_size = executed.tensors([n for n in names if n not in decoded])
        results.update(executed.post_tensors())
        return {name: results[name] for name in names}, batch_size

    def _cache_for(self, model: ModelVersion) -> ResponseCache | None:
        return self.cache if self.cache is not None and model.config.response_cache.enable else None

    def _cache_identity(self, model: ModelVersion) -> str:
        """What the cache keys ``model`` by: its own load, and for an ensemble the loads of the
        models it runs now (reloading a step changes the ensemble's answers too)."""
        parts = [model.identity]
        for name in model.composing_models:
            try:
                parts.append(self.manager.get(name).identity)
            except FerryError:
                parts.append(f"{name}\x00unavailable")
        return "\x01".join(parts)

    async def _cached(
        self, model: ModelVersion, cache: ResponseCache, key: bytes, compute: Callable[[], Awaitable[T]]
    ) -> T:
        """The cached answer for ``key``, or ``compute``'s, stored for next time (a hit skips the scheduler)."""
        started = time.perf_counter_ns()
        value = cache.get(key)
        lookup_ns = time.perf_counter_ns() - started
        if value is not None:
            model.stats.record_cache_hit(lookup_ns, lookup_ns)
            return value
        value = await compute()
        inserted = time.perf_counter_ns()
        stored = _owned(value)
        cache.put(key, stored, entry_size(stored))
        model.stats.record_cache_miss(lookup_ns + time.perf_counter_ns() - inserted)
        return stored

    def _on_device(self, model: ModelVersion) -> bool:
        """Whether ``model``'s executions may carry tensors in device memory: its scheduler batches
        them (the dynamic batcher), and no response cache (whose keys hash host bytes) nor image
        stage (whose post-stages read host arrays) is in the way."""
        return model.scheduler.takes_device_inputs and self._cache_for(model) is None and model.pipeline is None

    def _device_outputs(self, request: InferenceRequest) -> frozenset[str]:
        """The outputs asked into a CUDA region as they are (not as classifications)."""
        return frozenset(
            o.name
            for o in request.outputs or ()
            if o.shared_memory is not None
            and not o.classification
            and self.shared_memory.is_cuda(request.client, o.shared_memory.region)
        )

    async def _read_shared_memory(self, request: InferenceRequest, on_device: bool = False) -> None:
        """Inputs left in the client's shared memory regions become arrays (copies: see shared_memory.py).
        ``on_device``: those in a CUDA region become tensors viewing it, and the request's other
        inputs are placed beside them (not for BYTES, which stays in host memory)."""
        on_device = (
            on_device
            and not any(shared.datatype == "BYTES" for shared in request.shared_memory_inputs.values())
            and not any(array.dtype.hasobject for array in request.inputs.values())
        )
        viewed: list[str] = []
        for name, shared in request.shared_memory_inputs.items():
            check_input_size(self.limits, request.model_name, name, shared)
            view: Any = None
            if on_device:
                view = self.shared_memory.device_input(request.client, shared.ref, name, shared.datatype, shared.shape)
            if view is not None:
                request.inputs[name] = view
                request.input_datatypes[name] = shared.datatype
                viewed.append(name)
                continue
            if shared.ref.byte_size < OFF_LOOP_BYTES:
                view = self.shared_memory.read(request.client, shared.ref, name)
            else:
                view = await run_in(self.workers.codec, self.shared_memory.read, request.client, shared.ref, name)
            try:
                request.inputs[name] = tensor_from_bytes(name, shared.datatype, list(shared.shape), view)
            except CodecError as exc:
                raise InvalidArgument(f"{exc} (from shared memory region '{shared.ref.region}')") from None
            request.input_datatypes[name] = shared.datatype
        if viewed:
            from ..gpu.device_tensors import beside

            place = functools.partial(beside, request.inputs, request.input_datatypes, request.inputs[viewed[0]].device)
            uploaded = sum(array.nbytes for name, array in request.inputs.items() if name not in viewed)
            request.inputs = place() if uploaded < OFF_LOOP_BYTES else await run_in(self.workers.codec, place)
            request.device_inputs = frozenset(viewed)

    async def serve_images(
        self,
        name: str,
        version: str,
        images: list[bytes],
        task: str,
        options: dict[str, Any],
        parameters: dict[str, Any] | None = None,
        ticket: Reserves | None = None,
    ) -> tuple[ModelVersion, list[Any]]:
        """The /classify, /detect and /embed endpoints: images in, classes, boxes (original pixels) or
        vectors out.

        The same request path as V2 infer, with the model's image task as its post-stage; more
        images than max_batch_size become several executions, so callers need not know it.
        ``parameters`` are the request parameters infer takes (``priority``, ``timeout``); ``ticket``
        the request's admission, which the image stage counts decoding on.
        """
        model = self.path.resolve(name, version)
        check_image_request(model, images, task)
        cache = self._cache_for(model)
        compute: Callable[[], Awaitable[list[Any]]]
        if task == "ocr":
            compute = functools.partial(read_pages, self.path, model, images, parameters or {}, ticket)
        else:
            stage = image_task(model, task, options)
            request = stage.request(model, images, parameters or {})
            request.ticket = ticket
            compute = functools.partial(self.path.serve_image_task, model, stage, request)
            if cache is not None:  # not part of the key, but a hit must not accept bad values
                for parameter in ("priority", "timeout"):
                    int_parameter(request, parameter)
        if cache is None:
            return model, await compute()
        key = images_key(self._cache_identity(model), task, images, options)
        return model, await self._cached(model, cache, key, compute)

    # --- repository and statistics -----------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.manager.index(ready_only)

    async def load_model(self, name: str, config_json: str | None = None) -> None:
        await self.manager.load(name, config_json)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self.manager.unload(name, unload_dependents)

    def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Statistics of every ready version, or of one model (all its ready versions or one)."""
        if name:
            if version:
                models = [self.manager.get(name, version)]
            else:
                models = [m for m in self.manager.ready_models() if m.name == name]
                if not models:
                    self.manager.get(name)  # raises the precise not-found / not-ready error
        else:
            models = self.manager.ready_models()
        return [m.stats.as_dict() for m in sorted(models, key=lambda m: (m.name, m.version))]


def classification_tensor(array: np.ndarray, k: int, labels: list[str] | None, batched: bool) -> np.ndarray:
    """Triton's classification extension: the top-k classes as "score:index:label" strings."""
    rows = array.reshape(array.shape[0], -1) if batched else array.reshape(1, -1)
    k = min(k, rows.shape[1])
    out = np.empty((rows.shape[0], k), dtype=object)
    for index, row in enumerate(rows):
        out[index, :] = classification_strings(row, k, labels)
    return out if batched else out.reshape(k)


def _owned(value: Any) -> Any:
    """A value safe to keep: output arrays are copied out of their batch (a slice would pin all of it)."""
    if isinstance(value, tuple):
        results, batch_size = value
        return {name: np.array(array) for name, array in results.items()}, batch_size
    return value


def _image_input_metadata(model: ModelVersion) -> dict[str, Any]:
    """The encoded-image input an image model accepts besides its tensor input (metadata parameters)."""
    pipeline = model.pipeline
    assert pipeline is not None
    return {
        "image_input": pipeline.input_name,
        "image_datatype": "BYTES",
        "image_shape": "[-1]",
        "image_task": pipeline.task,
    }


def _tensor_metadata(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.full_shape(batched))}
