"""A model that pre-processes on its device (``preprocess { device: GPU }``) behind an intake process:
the intake decodes its images and hands them over as raw pixels (``pipelines.handed_images``; with
``decode: GPU``, its JPEGs as they are), instead of relaying the request for the model process to
decode; the answers are one process's. The device is torch's CPU device here (the model process's
``_gpu_preprocessor`` is pointed at it: this machine has no CUDA); a real model process, hub and
intake client, in one loop."""

from __future__ import annotations

import io
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ferry.api.dataplane import DataPlane
from ferry.intake.front_half import HandoffPath, IntakeImages
from ferry.intake.handoff import HandoffClient, HandoffHub
from ferry.intake.model_directory import ModelDirectory
from ferry.intake.model_views import ModelViews
from ferry.pipelines import handed_images
from ferry.repository.manager import ControlMode, ModelManager
from ferry.types import InferenceRequest, InferenceResponse

from ..conftest import MODEL_REPO

pytestmark = pytest.mark.torch
pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
from ferry.pipelines import runtime  # noqa: E402
from ferry.pipelines.device_decode import torchvision_problem  # noqa: E402
from ferry.pipelines.device_preprocess import DevicePreprocessor  # noqa: E402


def jpeg(png: bytes) -> bytes:
    buffer = io.BytesIO()
    Image.open(io.BytesIO(png)).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


@pytest.mark.parametrize("decode", ["CPU", "GPU"])
async def test_the_intake_decodes_for_a_model_that_preprocesses_on_its_device(
    tmp_path: Path, digit_pngs, monkeypatch: pytest.MonkeyPatch, decode: str
) -> None:
    if decode == "GPU" and torchvision_problem():
        pytest.skip(f"torchvision's JPEG decoder is not usable here ({torchvision_problem()})")
    pngs = digit_pngs[0][:4]
    files = [*pngs, *(jpeg(png) for png in pngs[:2])]
    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    config = repo / "digits" / "config.pbtxt"
    config.write_text(
        config.read_text().replace("resize_engine: PILLOW", f"resize_engine: PILLOW device: GPU decode: {decode}")
    )
    monkeypatch.setattr(runtime, "_gpu_preprocessor", lambda spec, gpu: DevicePreprocessor(spec, "cpu"))
    manager = ModelManager(repo, control_mode=ControlMode.EXPLICIT, startup_models=["digits"])
    await manager.start()
    plane = DataPlane(manager)
    plane.started = True
    handed: list[str] = []

    async def model_process(request: InferenceRequest) -> InferenceResponse:
        """The model process's data plane, noting the form of each image it is handed."""
        images = handed_images.unpack(request.inputs["input"])
        handed.extend("pixels" if image.ndim == 3 else bytes(image[:2]).hex() for image in images)
        return await plane.infer(request)

    hub = HandoffHub(model_process, 1 << 22, ModelDirectory(plane))
    await hub.start(str(tmp_path / "hub.sock"))
    client = HandoffClient(1, 1 << 22)
    pool = ThreadPoolExecutor(2)
    try:
        await client.connect(str(tmp_path / "hub.sock"))
        views = ModelViews(client)
        images = IntakeImages(plane.admission, views, HandoffPath(client, pool, 1), plane.workers)
        model = await views.resolve("digits", "")
        assert model is not None, "relayed: the intake does not serve the model's images"
        assert model.pipeline is not None and model.pipeline.batch_preprocessor is None  # no device here
        _, expected = await plane.serve_images("digits", "", files, "classify", {})  # one process
        decoder = manager.get("digits").pipeline.batch_preprocessor.decoder
        before = decoder.decoded if decoder is not None else 0
        served, results = await images.serve_images("digits", "", files, "classify", {})
        assert results == expected and served is model
        jpg = b"\xff\xd8".hex()
        assert handed == ["pixels"] * 4 + ([jpg] * 2 if decode == "GPU" else ["pixels"] * 2)
        if decoder is not None:  # the JPEGs the intake passed on were decoded on the model's device
            assert decoder.decoded - before == 2

        def v2() -> InferenceRequest:  # V2 infer with the encoded images in the model's tensor input
            tensor = np.empty(len(files), dtype=object)
            tensor[:] = files
            return InferenceRequest("digits", inputs={"input": tensor}, input_datatypes={"input": "BYTES"})

        handed.clear()
        answer = await images.infer(v2())
        assert answer is not None and len(handed) == len(files)  # handed over, not relayed
        np.testing.assert_array_equal(answer.outputs[0].data, (await plane.infer(v2())).outputs[0].data)
    finally:
        client.close()
        await hub.close()
        pool.shutdown()
        await manager.stop()
