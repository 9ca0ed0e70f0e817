"""ferry_client's classify() / detect() helpers against the real server, sync and asyncio."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
from PIL import Image

from ferry_client import AsyncHttpClient, HttpClient, InvalidArgumentError, NotFoundError
from ferry_client.images import Classification, Detection

from ..conftest import detector_module


def test_classify_paths_bytes_and_pil_images(server, digit_pngs, tmp_path) -> None:
    files, labels = digit_pngs
    path = tmp_path / "digit.png"
    path.write_bytes(files[0])
    pil = Image.open(io.BytesIO(files[1]))
    with HttpClient(server.http_url) as client:
        from_path = client.classify("digits", path, top_k=3)
        from_bytes = client.classify("digits", files[0], top_k=3)
        assert from_path == from_bytes and len(from_path) == 3
        assert all(isinstance(c, Classification) for c in from_path)
        assert from_path[0].label == str(labels[0]) and from_path[0].score >= from_path[1].score
        assert client.classify("digits", pil)[0].label == str(labels[1])
        batch = client.classify("digits", list(files[:40]))  # several images: one multipart request
    predicted = np.array([int(result[0].label) for result in batch])
    assert len(batch) == 40 and float(np.mean(predicted == labels[:40])) >= 0.95


def test_detect_returns_typed_boxes_in_original_pixels(server) -> None:
    build = detector_module()
    scenes = build.held_out_scenes(count=2)
    images = [Image.fromarray(scene.image) for scene in scenes]
    with HttpClient(server.http_url) as client:
        results = client.detect("digit_detector", images, score_threshold=0.3)
        single = client.detect("digit_detector", images[0], max_detections=1)
    assert len(results) == 2 and len(single) == 1
    for scene, found in zip(scenes, results, strict=True):
        assert found and all(isinstance(d, Detection) for d in found)
        boxes = np.array([d.box for d in found], dtype=np.float32)
        overlap = build.box_iou(scene.boxes.astype(np.float32), boxes)  # truth x detections
        for truth_index, truth_class in enumerate(scene.classes):
            hits = [found[j].class_id for j in np.flatnonzero(overlap[truth_index] > 0.5)]
            assert int(truth_class) in hits, (truth_index, hits)
        height, width = scene.image.shape[:2]
        assert all(0 <= d.box[0] < d.box[2] <= width and 0 <= d.box[1] < d.box[3] <= height for d in found)


def test_async_helpers_and_errors(server, digit_pngs) -> None:
    files, labels = digit_pngs

    async def run() -> None:
        async with AsyncHttpClient(server.http_url) as client:
            classes = await client.classify("digits", files[2], top_k=1)
            assert classes[0].label == str(labels[2])
            with pytest.raises(InvalidArgumentError, match="not a recognised image format"):
                await client.classify("digits", b"not an image")
            with pytest.raises(InvalidArgumentError, match="use /classify"):
                await client.detect("digits", files[0])
            with pytest.raises(NotFoundError):
                await client.classify("no_such_model", files[0])

    asyncio.run(run())
    with HttpClient(server.http_url) as client, pytest.raises(InvalidArgumentError, match="cannot read image"):
        client.classify("digits", "/no/such/file.png")
