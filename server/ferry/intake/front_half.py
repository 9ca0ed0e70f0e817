"""The core's front half in an intake process: ``/classify``, ``/detect``, ``/embed`` and V2 infer
with encoded images decoded,
validated and pre-processed here, in this process's own worker pool, by the very stages the
model process runs (``inference.path.FrontHalf``, ``inference.stages``); each execution's tensors
go to the model process through the arena as a V2 infer request (validated, traced, scheduled
there, with its statistics), and its raw outputs come back for the post-stage (top-k and labels,
detection decoding and NMS, pooling), which runs here too.

A model that pre-processes on the GPU (``preprocess { device: GPU }``) has its images decoded here,
upright and in its colour mode, and handed over as their raw uint8 pixels (``ImagePipeline.hand_over``,
``pipelines.handed_images``; with ``decode: GPU`` its JPEGs go as they are, to be decoded on the
device): the model process decodes nothing, reads the pixels where the hand-off put them, and resizes
and normalises each batch on its device.

A model whose image path cannot be split this way (``model_directory.relay_reason``: OCR,
ensembles, Python models that take encoded images, decoupled models, the response cache) has its
image requests relayed whole, as does any request when the model process reports an error for the
model (it then answers exactly as one process would).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ferry_client.protocol import model_config_pb2 as mc

from ..api.admission import Admission
from ..api.http_requests import error_to_response, image_endpoint
from ..errors import FerryError, InvalidArgument, Unavailable
from ..inference.path import FrontHalf, Outputs, record_invalid, with_preprocessed_input
from ..inference.stages.tasks import check_image_request, image_task
from ..inference.validation import check_before_decoding
from ..pipelines import handed_images
from ..pipelines.preprocess import ImageTransform
from ..pipelines.slices import ImageWork
from ..repository.model import ModelVersion
from ..response_streams import ResponseSink
from ..types import InferenceRequest, InferenceResponse, RequestedOutput, Reserves
from ..workers import Workers, run_in
from .handoff import HandoffClient, StaleModel
from .model_views import ModelViews

#: The image endpoints an intake serves itself, as FastAPI routes them.
IMAGE_PATH = re.compile(r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/(?P<task>classify|detect|embed)")

GPU = mc.FerryPreprocess.GPU
#: Times a request is pre-processed again when the model was reloaded while it was.
STALE_RETRIES = 2


class HandoffPath(FrontHalf):
    """Pre-stages and post-stages here; each execution run by the model process."""

    def __init__(self, client: HandoffClient, pool: Executor, image_share: int, work: ImageWork | None = None) -> None:
        super().__init__(pool, image_share, work)
        self.client = client

    async def pre_stages(
        self, model: ModelVersion, request: InferenceRequest, split: bool
    ) -> tuple[list[tuple[slice, InferenceRequest]], list[ImageTransform], bool]:
        """As ``FrontHalf.pre_stages``; for a model that pre-processes on its device, the images
        decoded here (``ImagePipeline.hand_over``) and sent as one tensor of their pixels per execution
        of at most ``max_batch_size`` (``handed_images``), which the model process takes without decoding."""
        pipeline = model.pipeline
        spec = pipeline.spec if pipeline is not None else None
        if pipeline is None or spec is None or spec.device != GPU or not self.image_input.applies(model, request):
            return await super().pre_stages(model, request, split)
        try:
            check_before_decoding(model, request)  # a refusal costs no decoding
            images = self.image_input.images_of(model, request, whole=not split)
            # decoded images are held until packed (a copy) into their execution's tensor
            await self.image_input.reserve(pipeline, images, request, waiting=True)
            handed, transforms = await run_in(self.pool, pipeline.hand_over, images)
        except InvalidArgument:
            record_invalid(model)
            raise
        executions = with_preprocessed_input(request, pipeline.input_name, handed_images.DATATYPE, handed)
        return executions, transforms, True

    async def _schedule(
        self, model: ModelVersion, request: InferenceRequest, names: Sequence[str], sink: ResponseSink | None = None
    ) -> tuple[ModelVersion, Outputs, int]:
        """The execution as a V2 infer of its tensors, for the load they were pre-processed for."""
        asked = [RequestedOutput(name, binary=True) for name in names]
        response = await self.client.infer(dataclasses.replace(request, outputs=asked), expect=model.identity)
        outputs = {output.name: output.data for output in response.outputs}
        batch_size = len(next(iter(request.inputs.values()))) if model.max_batch_size > 0 else 1
        return model, outputs, batch_size


class IntakeImages:
    """``http.ImagePlane`` in an intake process: admission here, the front half here."""

    def __init__(self, admission: Admission, views: ModelViews, path: HandoffPath, workers: Workers) -> None:
        self.admission = admission
        self.workers = workers
        self.views = views
        self.path = path

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
        """As ``DataPlane.serve_images`` on the load ``ImageRoutes`` resolved; pre-processed again
        (at most ``STALE_RETRIES`` times) for a load that replaced it meanwhile."""
        model = self.views.current(name, version)
        for attempt in range(STALE_RETRIES + 1):
            if model is None:  # reloaded meanwhile into a model whose requests are relayed
                raise Unavailable(f"model '{name}' was reloaded during the request; try again", retry_after=0)
            check_image_request(model, images, task)
            stage = image_task(model, task, options)
            request = stage.request(model, images, parameters or {})
            request.ticket = ticket
            try:
                return model, await self.path.serve_image_task(model, stage, request)
            except StaleModel:
                if attempt == STALE_RETRIES:
                    raise
            model = await self.views.resolve(name, version)
        raise AssertionError("unreachable")

    async def infer(self, request: InferenceRequest) -> InferenceResponse | None:
        """V2 infer with encoded images (BYTES) for an image model's tensor input: decoded and
        pre-processed here (``FrontHalf.pre_stages``, as one process), the tensors handed over as
        the same request. None when the request is for the model process as it is: no such input,
        a model whose image requests are relayed, decoded outputs asked for (their post-stage
        needs the images' transforms), several executions (a model that cannot batch),
        shared-memory inputs, or an error the model process reports for the model."""
        if request.shared_memory_inputs or "BYTES" not in request.input_datatypes.values():
            return None
        try:
            model = await self.views.resolve(request.model_name, request.model_version)
        except FerryError:
            return None
        for attempt in range(STALE_RETRIES + 1):
            if model is None or model.pipeline is None or not self.path.image_input.applies(model, request):
                return None
            if any(output.name in model.pipeline.decoded_outputs for output in request.outputs or ()):
                return None
            if model.max_batch_size == 0 and request.inputs[model.pipeline.input_name].size != 1:
                return None
            executions, _, _ = await self.path.pre_stages(model, request, split=False)
            (_, prepared), *more = executions
            if more:
                return None
            try:
                return await self.path.client.infer(prepared, expect=model.identity)
            except StaleModel:
                if attempt == STALE_RETRIES:
                    raise
            model = await self.views.resolve(request.model_name, request.model_version)
        raise AssertionError("unreachable")


class ImageRoutes:
    """``POST /v2/models/{m}[/versions/{v}]/{classify,detect,embed}`` through the front half when
    the model allows it; everything else (and those when it does not) to ``app``."""

    def __init__(self, app: ASGIApp, images: IntakeImages, max_body_bytes: int) -> None:
        self.app = app
        self.images = images
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = IMAGE_PATH.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if match is None or (match["version"] is None and b"version=" in scope.get("query_string", b"")):
            await self.app(scope, receive, send)  # ?version= is FastAPI's to bind: relayed
            return
        name, version = match["model"], match["version"] or ""
        try:
            model = await self.images.views.resolve(name, version)
        except FerryError:
            model = None  # the model process answers with the precise error
        if model is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await image_endpoint(self.images, request, name, version, match["task"], self.max_body_bytes)
        except Exception as exc:  # mapped exactly as the REST app's exception handlers map it
            response = error_to_response(request, exc)
        await response(scope, receive, send)
