"""The image front half in intake processes (``--intake-processes 2``): ``/classify`` and
``/detect`` decoded, pre-processed and post-processed in the intakes by the same stages as one
process, with the same answers, the same errors, and a reloaded pipeline used at once.

Two servers on copies of the same repository, one process and two intake processes, get the same
requests; their answers must be identical byte for byte (JSON equal). That the intakes did the
decoding is read from the model process: its image pool's ``ferry_image_decoded_total`` stays put
while the model's statistics count every image (the intakes report them) and the hand-off counter
counts one execution per batch of tensors (a relayed request is no hand-off).
"""

from __future__ import annotations

import io
import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from PIL import Image
from tritonclient.utils import InferenceServerException

from ..conftest import MODEL_REPO, RunningServer, detector_module, start_server
from ..server_metrics import metric, scrape

pytestmark = pytest.mark.timeout(120)

BODY_LIMIT = 1_000_000
DETECTOR_BATCH = 16  # max_batch_size of model_repo/digit_detector


def _repository(path: Path) -> Path:
    repo = path / "models"
    for name in ("digits", "digit_detector", "simple"):
        shutil.copytree(MODEL_REPO / name, repo / name)
    # a copy of the classifier to reload with another pipeline (the other tests keep theirs)
    shutil.copytree(MODEL_REPO / "digits", repo / "reloaded")
    config = repo / "reloaded" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "digits"', 'name: "reloaded"'))
    return repo


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningServer]]:
    """One process and two intake processes, each on its own copy of the repository."""
    running: dict[str, RunningServer] = {}
    try:
        for mode, processes in (("one", "1"), ("intakes", "2")):
            base = tmp_path_factory.mktemp(f"front_half_{mode}")
            running[mode] = start_server(
                _repository(base),
                base / "server.log",
                *("--model-control-mode", "explicit", "--load-model", "*"),
                *("--intake-processes", processes, "--http-max-body-bytes", str(BODY_LIMIT)),
            )
        yield running
    finally:
        for server in running.values():
            server.stop()


@pytest.fixture(scope="module")
def scenes() -> list[bytes]:
    """Held-out detector scenes as PNG files: more than one batch of the detector."""
    pngs = []
    for scene in detector_module().held_out_scenes(count=DETECTOR_BATCH + 4):
        buffer = io.BytesIO()
        Image.fromarray(scene.image).save(buffer, format="PNG")
        pngs.append(buffer.getvalue())
    return pngs


def _post(server: RunningServer, path: str, images: list[bytes] | None = None, **kwargs) -> httpx.Response:
    if images is not None:
        kwargs["files"] = [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(images)]
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        return client.post(path, **kwargs)


def _both(servers: dict[str, RunningServer], path: str, images: list[bytes] | None = None, **kwargs) -> httpx.Response:
    """The intakes' answer, checked equal (status, JSON, Retry-After) to one process's."""
    one = _post(servers["one"], path, images, **kwargs)
    intakes = _post(servers["intakes"], path, images, **kwargs)
    assert (intakes.status_code, intakes.json(), intakes.headers.get("retry-after")) == (
        one.status_code,
        one.json(),
        one.headers.get("retry-after"),
    ), path
    return intakes


def test_classify_and_detect_through_two_intakes_equal_one_process(servers, scenes, digit_pngs) -> None:
    files, _ = digit_pngs
    detected = _both(servers, "/v2/models/digit_detector/detect", scenes)  # two executions (batch 16)
    assert detected.status_code == 200
    assert sum(len(image["detections"]) for image in detected.json()["results"]) >= len(scenes)
    _both(servers, "/v2/models/digit_detector/detect?score_threshold=0.6&max_detections=2&iou_threshold=0.3", scenes)
    _both(servers, "/v2/models/digit_detector/versions/1/detect", content=scenes[0])
    classified = _both(servers, "/v2/models/digits/classify", files[:70])  # two executions (batch 64)
    assert [r["classes"][0]["label"] for r in classified.json()["results"]].count(None) == 0
    _both(servers, "/v2/models/digits/classify?top_k=7&priority=1&timeout=60000000", files[:5])
    _both(servers, "/v2/models/digits/classify", content=files[3], headers={"Content-Type": "image/png"})


def _image_counters(server: RunningServer, model: str) -> tuple[float, float, float, float]:
    """Images decoded by the model process's own pool and by the intakes' pools, executions handed
    over by intakes, and the model's image count (its statistics, as ``ferry_image_count``)."""
    text = scrape(server)
    rows = (1, 2) if "ferry_intake_handoffs_total" in text else ()
    handoffs = sum(metric(text, "ferry_intake_handoffs_total", row=str(row)) for row in rows)
    in_intakes = sum(metric(text, "ferry_intake_images_decoded_total", row=str(row)) for row in rows)
    whole_server = metric(text, "ferry_image_decoded_total")
    counted = metric(text, "ferry_image_count", model=model, version="1")
    return whole_server - in_intakes, in_intakes, handoffs, counted


def _delta(after: tuple[float, ...], before: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(a - b for a, b in zip(after, before, strict=True))


def test_the_intakes_decode_and_the_model_process_does_not(servers, scenes) -> None:
    for mode, server in servers.items():
        before = _image_counters(server, "digit_detector")
        assert _post(server, "/v2/models/digit_detector/detect", scenes).status_code == 200
        model_pool, intake_pools, handoffs, counted = _delta(_image_counters(server, "digit_detector"), before)
        assert counted == len(scenes), mode  # the statistics count every image
        if mode == "one":
            assert (model_pool, intake_pools) == (len(scenes), 0)
        else:  # decoded in the intakes; two batches of tensors handed over
            assert (model_pool, intake_pools, handoffs) == (0, len(scenes), 2)


def _png_declaring(width: int, height: int) -> bytes:
    """A small PNG whose header declares ``width`` x ``height`` (a pixel bomb's first bytes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )


def test_errors_are_one_process_errors(servers, digit_pngs) -> None:
    files, _ = digit_pngs
    good = files[0]
    cases: list[tuple[str, dict]] = [
        ("/v2/models/digits/classify", {"content": b"not an image at all"}),
        ("/v2/models/digits/classify", {"content": good[: len(good) // 2]}),
        ("/v2/models/digit_detector/detect", {"images": [good, b"garbage", good]}),
        ("/v2/models/digits/classify", {"content": _png_declaring(20_000, 20_000)}),
        ("/v2/models/digits/classify", {"content": b""}),
        ("/v2/models/digits/classify", {"data": {"field": "no files"}}),
        ("/v2/models/digits/classify", {"content": b"\0" * (BODY_LIMIT + 1)}),
        ("/v2/models/no_such_model/classify", {"content": good}),
        ("/v2/models/digits/versions/9/classify", {"content": good}),
        ("/v2/models/simple/classify", {"content": good}),  # no image pipeline: relayed
        ("/v2/models/digits/detect", {"content": good}),  # a classifier
        ("/v2/models/digit_detector/classify", {"content": good}),
        ("/v2/models/digits/classify?top_k=0", {"content": good}),
        ("/v2/models/digits/classify?threshold=1", {"content": good}),
        ("/v2/models/digit_detector/detect?score_threshold=2", {"content": good}),
        ("/v2/models/digit_detector/detect?max_detections=", {"content": good}),
        ("/v2/models/digits/classify?priority=-1", {"content": good}),
        ("/v2/models/digits/classify?priority=99", {"content": good}),  # checked by the model process
    ]
    for path, kwargs in cases:
        answer = _both(servers, path, **kwargs)
        assert answer.status_code >= 400, (path, answer.text)


def test_a_reloaded_pipeline_is_used_at_once(servers, digit_pngs) -> None:
    """Reloading with another pre-processing (half the scale) changes the answers, and the intakes
    give the new ones from the first request after the reload."""
    files, _ = digit_pngs
    before = _both(servers, "/v2/models/reloaded/classify", files[:8]).json()
    for server in servers.values():
        config = server.repository / "reloaded" / "config.pbtxt"
        config.write_text(config.read_text().replace("scale: 0.0039215686", "scale: 0.0019607843"))
        with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
            assert client.post("/v2/repository/models/reloaded/load").status_code == 200
    after = _both(servers, "/v2/models/reloaded/classify", files[:8]).json()
    assert after != before


def _infer_images(server: RunningServer, model: str, images: list[bytes], output: str) -> tuple[str, object]:
    """V2 infer over gRPC with ``images`` as the BYTES input: the output, or the error's code and text."""
    client = tgrpc.InferenceServerClient(server.grpc_url)
    try:
        tensor = tgrpc.InferInput("input" if model == "digits" else "images", [len(images)], "BYTES")
        tensor.set_data_from_numpy(np.array(images, dtype=object))
        result = client.infer(model, [tensor], outputs=[tgrpc.InferRequestedOutput(output)])
        return "ok", result.as_numpy(output).tolist()
    except InferenceServerException as exc:
        return str(exc.status()), exc.message()
    finally:
        client.close()


def test_encoded_images_through_v2_infer_are_decoded_in_the_intakes(servers, scenes, digit_pngs) -> None:
    files, _ = digit_pngs
    before = _image_counters(servers["intakes"], "digits")
    for model, images, output in (("digits", files[:9], "logits"), ("digit_detector", scenes[:3], "output0")):
        answers = {mode: _infer_images(server, model, images, output) for mode, server in servers.items()}
        assert answers["one"][0] == "ok" and answers["intakes"] == answers["one"]
    # model pool, intake pools, hand-offs, images counted for digits
    assert _delta(_image_counters(servers["intakes"], "digits"), before) == (0, 12, 2, 9)
    bad = [
        ("digits", [files[0], b"not an image"], "logits"),
        ("digits", files[:65], "logits"),  # beyond max_batch_size 64
        ("digit_detector", scenes[:1], "detection_boxes"),  # decoded outputs: relayed, still answered
    ]
    for model, images, output in bad:
        answers = {mode: _infer_images(server, model, images, output) for mode, server in servers.items()}
        assert answers["intakes"] == answers["one"], answers
