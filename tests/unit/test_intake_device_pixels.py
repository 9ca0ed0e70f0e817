"""A model that pre-processes on its device (``preprocess { device: GPU }``) behind an intake process
(issue 41, item 4): the intake decodes its images and hands over their raw pixels, which the model
process takes without decoding (``pipelines.handed_images``); the engine gets exactly the tensors one
process makes. Admission counts the pixels the device path holds in host memory (the upload buffer,
and images decoded here while they wait), before they are paid.

Torch is not installed here, so the model process's device pre-processor is a stand-in with the CPU
path's own resize and normalisation (``NumpyPreprocessor``) and its scheduler takes host inputs: the
pre-processor then runs per request, as with an engine that reads host memory (the torch tests,
``test_intake_device_images.py`` and ``test_device_tensor_batches.py``, cover the device itself).
A real model process (manager, data plane, admission, hand-off hub) and intake client, in one loop."""

from __future__ import annotations

import io
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from ferry.api.admission import Admission
from ferry.api.dataplane import DataPlane
from ferry.api.http import create_http_app
from ferry.intake.front_half import HandoffPath, ImageRoutes, IntakeImages
from ferry.intake.handoff import HandoffClient, HandoffHub
from ferry.intake.model_directory import ModelDirectory
from ferry.intake.model_views import ModelViews
from ferry.pipelines import handed_images, runtime
from ferry.pipelines.preprocess import Placement, PreprocessSpec, preprocess
from ferry.repository.manager import ControlMode, ModelManager
from ferry.types import InferenceRequest, InferenceResponse

from ..conftest import MODEL_REPO

pytestmark = pytest.mark.timeout(120)
MIB = 1 << 20
SIDE = 1000  # of the large images: SIDE * SIDE bytes of grey pixels each


class NumpyPreprocessor:
    """Stands in for the torch ``DevicePreprocessor``: each image's pixels resized and normalised by
    the CPU path (``preprocess``), so its batch is exactly what one process's Pillow path makes."""

    device = "cpu"
    decoder = None

    def __init__(self, spec: PreprocessSpec) -> None:
        self.spec = spec

    def __call__(self, images: Sequence[np.ndarray], placements: Sequence[Placement], on_device: bool = False) -> Any:
        batch = np.empty((len(images), *self.spec.tensor_shape), dtype=self.spec.dtype)
        for index, (pixels, where) in enumerate(zip(images, placements, strict=True)):
            image = Image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)
            batch[index] = preprocess(image, self.spec, where)[0]
        return batch


@dataclass
class Servers:
    """The model process (``plane``) and an intake's image front (``images``, ``intake_app``)."""

    plane: DataPlane
    images: IntakeImages
    handed: list[InferenceRequest] = field(default_factory=list)  # what the model process was handed
    tickets: list[Any] = field(default_factory=list)  # the model process's tickets for them
    engine: list[np.ndarray] = field(default_factory=list)  # each execution's input at the engine
    decoded: list[int] = field(default_factory=list)  # one per image decoded, by either process

    def one_process_app(self) -> httpx.AsyncClient:
        return _client(create_http_app(self.plane))

    def intake_app(self) -> httpx.AsyncClient:
        return _client(ImageRoutes(create_http_app(self.plane), self.images, 1 << 30))


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ferry")


@asynccontextmanager
async def servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, admission: Admission, device_inputs: bool = False
) -> AsyncIterator[Servers]:
    """digits pre-processing on its (stand-in) device, one process and behind an intake, sharing
    ``admission`` as the processes of one server share their counts. ``device_inputs``: its batcher
    takes device inputs, so decoded images wait for their batch (``DevicePixels``; none may reach
    the batcher then: joining them needs torch)."""
    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    config = repo / "digits" / "config.pbtxt"
    config.write_text(config.read_text().replace("resize_engine: PILLOW", "resize_engine: PILLOW device: GPU"))
    monkeypatch.setattr(runtime, "_gpu_preprocessor", lambda spec, gpu: NumpyPreprocessor(spec))
    manager = ModelManager(repo, control_mode=ControlMode.EXPLICIT, startup_models=["digits"])
    await manager.start()
    plane = DataPlane(manager, admission=admission)
    plane.started = True
    model = manager.get("digits")
    monkeypatch.setattr(model.scheduler, "takes_device_inputs", device_inputs)  # without torch: host inputs
    compute = model.instances[0].compute

    def recorded(inputs: dict[str, Any], outputs: list[str]) -> dict[str, np.ndarray]:
        found.engine.append(np.array(inputs["input"]))
        return compute(inputs, outputs)

    monkeypatch.setattr(model.instances[0], "compute", recorded)
    decode = runtime.decode_image

    def counted(*args: Any, **kwargs: Any) -> Image.Image:
        found.decoded.append(1)
        return decode(*args, **kwargs)

    monkeypatch.setattr(runtime, "decode_image", counted)

    async def model_process(request: InferenceRequest) -> InferenceResponse:
        found.handed.append(request)
        try:
            return await plane.infer(request)
        finally:
            found.tickets.append(request.ticket)

    hub = HandoffHub(model_process, 256 * MIB, ModelDirectory(plane), admission)
    await hub.start(str(tmp_path / "hub.sock"))
    client = HandoffClient(1, 256 * MIB)
    pool = ThreadPoolExecutor(2)
    try:
        await client.connect(str(tmp_path / "hub.sock"))
        views = ModelViews(client)
        images = IntakeImages(admission, views, HandoffPath(client, pool, 1), plane.workers)
        found = Servers(plane, images)
        yield found
    finally:
        client.close()
        await hub.close()
        pool.shutdown()
        await manager.stop()


def _encoded(image: Image.Image, fmt: str, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def _turned_jpeg() -> bytes:
    """An RGB JPEG whose EXIF says to turn it (orientation 6): handed over upright, in grey."""
    ramp = np.add.outer(np.arange(30, dtype=np.uint16), np.arange(50, dtype=np.uint16) * 3).astype(np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6
    return _encoded(Image.fromarray(np.dstack([ramp, ramp[::-1], 255 - ramp])), "JPEG", quality=90, exif=exif)


async def test_the_intake_hands_over_pixels_the_model_process_takes_without_decoding(
    tmp_path: Path, digit_pngs: tuple[list[bytes], np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [*digit_pngs[0][:4], _turned_jpeg()]
    async with servers(tmp_path, monkeypatch, Admission()) as found:
        model = await found.images.views.resolve("digits", "")
        assert model is not None, "relayed: the intake does not serve the model's images"
        _, expected = await found.plane.serve_images("digits", "", files, "classify", {})  # one process
        one_process = found.engine[:]
        del found.decoded[:]
        _, results = await found.images.serve_images("digits", "", files, "classify", {})
        assert results == expected
        # the engine got exactly one process's tensors
        assert len(found.engine) == 2 and np.array_equal(found.engine[1], one_process[0])
        # each image was decoded once, in the intake; the model process was handed its pixels
        assert len(found.decoded) == len(files)
        (handed,) = found.handed
        assert handed.input_datatypes["input"] == "UINT8" and handed.preprocessed == {"input"}
        pixels = handed_images.unpack(handed.inputs["input"])
        for data, image in zip(files, pixels, strict=True):
            upright = runtime.to_model_mode(runtime.decode_image(data, max_pixels=1 << 24), model.pipeline.spec)
            np.testing.assert_array_equal(image[:, :, 0], np.asarray(upright))

        # V2 infer with encoded images in the model's input: handed over the same way
        tensor = np.empty(len(files), dtype=object)
        tensor[:] = files

        def v2() -> InferenceRequest:
            return InferenceRequest("digits", inputs={"input": tensor}, input_datatypes={"input": "BYTES"})

        answer = await found.images.infer(v2())
        assert answer is not None and len(found.handed) == 2  # handed over, not relayed
        assert found.handed[1].input_datatypes["input"] == "UINT8"
        np.testing.assert_array_equal(answer.outputs[0].data, (await found.plane.infer(v2())).outputs[0].data)


def _large_pngs(count: int) -> list[bytes]:
    """Grey SIDE x SIDE PNGs (1 MB of pixels each) that compress to a few KB."""
    ramp = np.add.outer(np.arange(SIDE), np.arange(SIDE)).astype(np.uint8)
    return [_encoded(Image.fromarray(ramp + index), "PNG") for index in range(count)]


async def _classify(client: httpx.AsyncClient, files: list[bytes]) -> httpx.Response:
    async with client:
        parts = [("image", (f"{index}.png", data, "image/png")) for index, data in enumerate(files)]
        return await client.post("/v2/models/digits/classify", files=parts)


@pytest.mark.parametrize("intake", [False, True], ids=["one-process", "intake"])
async def test_host_pixels_of_the_device_path_are_counted_before_they_are_paid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, intake: bool
) -> None:
    """Under a cap the request's pixels alone fill (without them it fits: one image decoded at a
    time, 28 x 28 tensors), it is refused with 413 before a pixel is decoded."""
    admission = Admission()
    async with servers(tmp_path, monkeypatch, admission) as found:
        files = _large_pngs(16 * found.plane.workers.image_share)
        app: Callable[[], httpx.AsyncClient] = found.intake_app if intake else found.one_process_app
        admission.max_bytes = len(files) * SIDE * SIDE  # the pixels' bytes
        response = await _classify(app(), files)
        assert response.status_code == 413, response.text
        assert "--max-inflight-bytes" in response.json()["error"]
        assert admission.rejected == 1 and found.decoded == [] and found.handed == []
        assert admission.bytes == 0 and admission.requests == 0

        admission.max_bytes = 0  # no cap: served, and what it held given back
        response = await _classify(app(), files)
        assert response.status_code == 200, response.text
        assert len(response.json()["results"]) == len(files)
        assert admission.bytes == 0 and admission.requests == 0


async def test_the_model_process_counts_the_handed_pixels_it_uploads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an intake, the pixels are counted twice where they are: the intake's block (on its
    ticket, ``elsewhere`` in the model process) and the model process's upload buffer (its own
    ticket): a cap with room for the first only is refused by the model process, 413."""
    admission = Admission()
    async with servers(tmp_path, monkeypatch, admission) as found:
        files = _large_pngs(8)
        assert (await _classify(found.intake_app(), files)).status_code == 200
        (ticket,) = found.tickets
        pixels = len(files) * SIDE * SIDE
        assert ticket.nbytes == pixels + 2 * len(files) * 28 * 28 * 4  # the upload buffer's copy of the handed pixels
        assert ticket.elsewhere >= 2 * pixels  # the intake's: decoded and packed, and its block
        admission.max_bytes = ticket.elsewhere + ticket.nbytes - 1
        response = await _classify(found.intake_app(), files)
        assert response.status_code == 413, response.text
        assert "--max-inflight-bytes" in response.json()["error"]
        assert admission.rejected == 1 and len(found.handed) == 2  # refused in the model process
        assert len(found.engine) == 1  # never reached the engine


async def test_decoded_images_waiting_for_their_batch_are_counted_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process whose batcher pre-processes each batch on the device: a request's decoded images
    all wait for their batch, besides the upload buffer's copy of them. Under a cap of twice their
    pixels (the copy, one image decoding at a time and the tensors fit) it is refused, 413, before a
    pixel is decoded."""
    admission = Admission()
    async with servers(tmp_path, monkeypatch, admission, device_inputs=True) as found:
        files = _large_pngs(16 * found.plane.workers.image_share)
        admission.max_bytes = 2 * len(files) * SIDE * SIDE
        response = await _classify(found.one_process_app(), files)
        assert response.status_code == 413, response.text
        assert "--max-inflight-bytes" in response.json()["error"]
        assert admission.rejected == 1 and found.decoded == [] and found.engine == []
        assert admission.bytes == 0 and admission.requests == 0
