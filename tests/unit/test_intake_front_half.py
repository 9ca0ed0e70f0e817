"""The intake's front half against a real model process's data plane, in one event loop: a model
reloaded with another pre-processing between the intake's look-up and its hand-off is refused as
stale by the model process, and the intake pre-processes the images again for the new load."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ferry.api.dataplane import DataPlane
from ferry.intake.front_half import HandoffPath, IntakeImages
from ferry.intake.handoff import HandoffClient, HandoffHub
from ferry.intake.model_directory import ModelDirectory
from ferry.intake.model_views import ModelViews
from ferry.repository.manager import ControlMode, ModelManager

from ..conftest import MODEL_REPO


async def test_a_reload_after_the_look_up_is_preprocessed_again_for_the_new_load(tmp_path: Path, digit_pngs) -> None:
    files = digit_pngs[0][:6]
    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    manager = ModelManager(repo, control_mode=ControlMode.EXPLICIT, startup_models=["digits"])
    await manager.start()
    plane = DataPlane(manager)
    plane.started = True
    hub = HandoffHub(plane.infer, 1 << 22, ModelDirectory(plane))
    await hub.start(str(tmp_path / "hub.sock"))
    client = HandoffClient(1, 1 << 22)
    pool = ThreadPoolExecutor(2)
    try:
        await client.connect(str(tmp_path / "hub.sock"))
        views = ModelViews(client)
        images = IntakeImages(plane.admission, views, HandoffPath(client, pool, 1), plane.workers)
        first = await views.resolve("digits", "")
        assert first is not None and first.pipeline is not None
        _, before = await plane.serve_images("digits", "", files, "classify", {})

        config = repo / "digits" / "config.pbtxt"
        config.write_text(config.read_text().replace("scale: 0.0039215686", "scale: 0.0019607843"))
        await manager.load("digits")  # a new load with another pipeline, after the intake's look-up
        _, expected = await plane.serve_images("digits", "", files, "classify", {})
        assert expected != before

        served, results = await images.serve_images("digits", "", files, "classify", {})
        now = views.current("digits", "")
        assert now is not None and now.identity != first.identity  # looked up again after "stale"
        assert now.identity == manager.get("digits").identity
        assert results == expected and served is now
        assert now.pipeline is not None and now.pipeline.spec != first.pipeline.spec
    finally:
        client.close()
        await hub.close()
        pool.shutdown()
        await manager.stop()
