"""Pre-stage: encoded images (BYTES) sent to an image model's tensor input become its
pre-processed batch, decoded in the worker pool a few images at a time (``pipelines.slices``)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from typing import cast

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from ...errors import InvalidArgument
from ...pipelines import handed_images
from ...pipelines.resize_bounds import device_image_cost, image_cost
from ...pipelines.runtime import ImagePipeline, Prepared
from ...pipelines.slices import ImageWork, prepare_in_slices
from ...repository.model import ModelSpec, ModelVersion
from ...types import InferenceRequest
from ...workers import run_in

GPU = mc.FerryPreprocess.GPU


class ImageInput:
    """Decodes and pre-processes a request's encoded images on a shared pool, fair between requests."""

    def __init__(self, pool: Executor, share: int, work: ImageWork) -> None:
        self.pool = pool
        self.share = share  # pool tasks one request may occupy at once
        self.work = work

    @staticmethod
    def applies(model: ModelSpec, request: InferenceRequest) -> bool:
        """Whether the request sends encoded images where the model's pipeline expects a tensor,
        or (from an intake) images it decoded for a model that pre-processes on its device."""
        pipeline = model.pipeline
        if pipeline is None or pipeline.spec is None:
            return False
        name = pipeline.input_name
        if pipeline.spec.device == GPU and handed_images.handed(request, name):
            return True
        return request.input_datatypes.get(name) == "BYTES" and model.inputs[name].datatype != "BYTES"

    async def __call__(self, model: ModelVersion, request: InferenceRequest, whole: bool) -> Prepared:
        """The request's images decoded into one batch, with each image's transform.

        ``whole``: the images must fit one execution (V2 infer: more than ``max_batch_size`` is the
        caller's error, refused before a single image is decoded); otherwise the path splits them.
        """
        pipeline = model.pipeline
        assert pipeline is not None
        images = self.images_of(model, request, whole)
        # a device pre-processor's work stays on its device where the scheduler takes device inputs
        # (an input the config reshapes is reshaped as numpy: the host path)
        on_device = (
            pipeline.batch_preprocessor is not None
            and model.scheduler.takes_device_inputs
            and model.inputs[pipeline.input_name].reshape is None
        )
        await self.reserve(pipeline, images, request, waiting=pipeline.waits_for_batch(on_device))
        prepared = await prepare_in_slices(self.pool, self.share, pipeline, images, self.work, on_device)
        model.stats.record_images(len(images), prepared.decode_ns, prepared.preprocess_ns)
        return prepared

    @staticmethod
    def images_of(model: ModelVersion, request: InferenceRequest, whole: bool) -> list[bytes | np.ndarray]:
        """The request's encoded images (or those an intake handed over: ``handed_images``), refused
        (before any is decoded) when their tensor has the wrong shape or, with ``whole``, they are more
        than one execution holds."""
        pipeline = model.pipeline
        assert pipeline is not None
        name = pipeline.input_name
        encoded = request.inputs[name]
        if handed_images.handed(request, name):  # one execution's, as the intake split them
            return list(handed_images.unpack(encoded))
        if encoded.ndim not in (1, 2) or (encoded.ndim == 2 and encoded.shape[1] != 1):
            raise InvalidArgument(
                f"input '{name}': encoded images must have shape [N] or [N, 1], got {list(encoded.shape)}"
            )
        count = encoded.shape[0]
        if whole and model.max_batch_size > 0 and count > model.max_batch_size:
            raise InvalidArgument(
                f"input '{name}': {count} images exceed the max_batch_size {model.max_batch_size} "
                f"of model '{model.name}'"
            )
        return list(np.asarray(encoded).reshape(-1))

    async def reserve(
        self,
        pipeline: ImagePipeline,
        images: Sequence[bytes | np.ndarray],
        request: InferenceRequest,
        waiting: bool = False,
    ) -> None:
        """Count decoding's peak on the request's ticket (refused past the caps) before any image is
        decoded; ``waiting``: the images decoded here are all held until their batch (``DevicePixels``,
        or an intake's hand-over)."""
        peak = await self._peak_cost(pipeline, images, waiting)
        if request.ticket is not None:
            request.ticket.reserve(peak)

    async def _peak_cost(self, pipeline: ImagePipeline, images: Sequence[bytes | np.ndarray], waiting: bool) -> int:
        """What decoding and pre-processing the images holds at its peak, from their headers (an
        image whose resize would pass the pixel limit is refused here, before any is decoded):
        the ``share`` costliest decoded at once (one per pool task), and the pre-processed batch
        twice (the slices' batches and the one they are joined into). On the device path, the
        host pixels too: copied into the device's upload buffer (an intake: into the tensor it hands
        over), and with ``waiting`` those decoded here, held until then."""
        spec = pipeline.spec
        assert spec is not None
        max_pixels = pipeline.max_pixels

        def costs() -> list[tuple[int, int, int, int]]:
            if spec.device == GPU:
                return [device_image_cost(data, spec, max_pixels, index) for index, data in enumerate(images)]
            encoded = cast(Sequence[bytes], images)
            return [(*image_cost(data, spec, max_pixels, index), 0, 0) for index, data in enumerate(encoded)]

        # reading many headers takes a while: on the image pool
        found = await run_in(self.pool, costs) if len(images) > 16 else costs()
        peaks = sorted(peak for peak, _, _, _ in found)
        held = sum(decoded for _, _, _, decoded in found) if waiting else 0
        return (
            sum(peaks[-self.share :])
            + 2 * sum(tensor for _, tensor, _, _ in found)
            + sum(pixels for _, _, pixels, _ in found)
            + held
        )
