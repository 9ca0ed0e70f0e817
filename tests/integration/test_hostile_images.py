"""Hostile image uploads (issue 15): two clients send hundreds of large images each. Another image
request is answered while most of theirs still wait to be decoded (each request gets only a share of
the decode pool, it is not queued behind them), and when the two hang up their remaining images are
never decoded."""

from __future__ import annotations

import asyncio
import io
import shutil
from collections.abc import Iterator

import aiohttp
import pytest
from PIL import Image

from ..conftest import MODEL_REPO, RunningServer, start_server
from ..server_metrics import metric, scrape, wait_for_metric

IMAGES_PER_UPLOAD = 256  # 4 MP each: tens of seconds of decoding per upload on two cores
SIDE = 2000


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_images") / "models"
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    running = start_server(repo, repo.parent / "server.log")
    yield running
    running.stop()


def _png(side: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (side, side), 200).save(out, format="PNG")
    return out.getvalue()


def _form(images: list[bytes]) -> aiohttp.FormData:
    form = aiohttp.FormData()
    for index, data in enumerate(images):
        form.add_field("images", data, filename=f"{index}.png", content_type="image/png")
    return form


def test_large_uploads_share_the_pool_and_stop_when_their_clients_leave(server) -> None:
    big = _png(SIDE)
    small = _png(8)
    url = f"http://{server.http_url}/v2/models/digits/classify"

    async def run() -> tuple[float, float, float]:
        decoded_before = metric(await asyncio.to_thread(scrape, server), "ferry_image_decoded_total")
        attackers = [aiohttp.ClientSession() for _ in range(2)]
        uploads = [
            asyncio.ensure_future(session.post(url, data=_form([big] * IMAGES_PER_UPLOAD))) for session in attackers
        ]
        # the attack is in place: both uploads' images are queued for the pool
        await wait_for_metric(server, "ferry_image_waiting", 2 * IMAGES_PER_UPLOAD - 8)
        async with aiohttp.ClientSession() as session, session.post(url, data=_form([small])) as response:
            assert response.status == 200, await response.text()
            assert len((await response.json())["results"]) == 1
        # answered while most of the uploads' images still wait: it was not queued behind them
        waiting = metric(await asyncio.to_thread(scrape, server), "ferry_image_waiting")
        for upload in uploads:  # the two clients hang up
            upload.cancel()
        for session in attackers:
            await session.close()
        await wait_for_metric(server, "ferry_image_waiting", 0, at_most=True)
        decoded = metric(await asyncio.to_thread(scrape, server), "ferry_image_decoded_total") - decoded_before
        return waiting, decoded, 2 * IMAGES_PER_UPLOAD

    waiting, decoded, sent = asyncio.run(run())
    print(f"small image answered with {waiting:.0f} images waiting; {decoded:.0f} of {sent} decoded")
    assert waiting >= sent / 2
    assert decoded < sent / 2  # the rest were dropped when their clients left
