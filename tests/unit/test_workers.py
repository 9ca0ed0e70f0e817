"""The process's named pools (``ferry.workers``): request CPU work runs on them, sized from the
settings, and they are shut down when the server stops (issue 40, item 3)."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from ferry.api.dataplane import DataPlane
from ferry.repository.manager import ModelManager
from ferry.server import FerryServer
from ferry.settings import Settings
from ferry.types import ControlMode
from ferry.workers import Workers

HERE = Path(__file__).resolve().parent
MODEL_REPO = HERE.parents[1] / "model_repo"


def _page() -> bytes:
    """A page with one dark bar, so the detector finds a line and every OCR step runs."""
    image = Image.new("RGB", (320, 96), "white")
    image.paste((0, 0, 0), (40, 36, 280, 60))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _recorded(pool: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions submitted to ``pool`` from now on."""
    names: list[str] = []
    submit: Callable[..., Future] = pool.submit

    def recording(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        names.append(getattr(function, "__name__", repr(function)))
        return submit(function, *args, **kwargs)

    monkeypatch.setattr(pool, "submit", recording)
    return names


@pytest.mark.asyncio
async def test_ocr_page_steps_run_on_the_image_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OCR model's CPU steps ran on asyncio's default executor, which ``--image-workers``
    does not bound; they are image work, on the image pool."""
    from tests import ocr_reference

    source = ocr_reference.ensure_models()
    root = tmp_path / "models"
    for name in (*ocr_reference.MODELS, "ocr"):
        shutil.copytree(source / name, root / name)
    workers = Workers(image_workers=2)
    image_work = _recorded(workers.image, monkeypatch)
    manager = ModelManager(root, ControlMode.EXPLICIT, startup_models=["ocr"], workers=workers)
    await manager.start()
    try:
        plane = DataPlane(manager)
        await plane.serve_images("ocr", "", [_page()], "ocr", {})
    finally:
        await manager.stop()
        workers.shutdown()
    assert {"start_page", "cut_crops"} <= set(image_work), image_work


@pytest.mark.asyncio
async def test_the_server_shuts_its_pools_down_at_stop(tmp_path: Path) -> None:
    """The model process's image pool was never shut down; now every named pool is."""
    root = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "simple", root / "simple")
    server = FerryServer(Settings(model_repository=root, image_workers=3, exit_timeout_secs=1))
    workers = server.manager.workers
    assert workers.image._max_workers == 3  # sized from the settings
    await server.shutdown()
    for pool in (workers.image, workers.codec):
        with pytest.raises(RuntimeError, match="shutdown"):
            pool.submit(print)
