"""CUDA shared memory on a GPU server, read and written on the device: the TorchScript digits take
their input from a client's CUDA region (as a tensor viewing it) and write their logits into
another one, with tritonclient's ``cuda_shared_memory`` utilities over HTTP and gRPC; the answers
are those of the same images sent in the request body. Needs a GPU (``gpu`` marker): skipped here."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ..conftest import EXTRAS_REPO, RunningServer, start_server
from .triton_helpers import connect

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
pytestmark = [pytest.mark.gpu, pytest.mark.torch, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

IMAGES = 4
IMAGE = 28 * 28 * 4
LOGITS = 10 * 4
MODEL = "digits_tensors"
TF32_TOLERANCE = 2e-2  # FP32 convolutions use TF32 on the GPU, in either path


def _cuda_shared_memory() -> Any:
    try:
        import tritonclient.utils.cuda_shared_memory as cudashm
    except Exception:
        return None
    return cudashm if torch.cuda.is_available() else None


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    if _cuda_shared_memory() is None:
        pytest.skip("needs CUDA, torch and tritonclient[cuda]")
    root = tmp_path_factory.mktemp("cuda_shm_device")
    shutil.copytree(EXTRAS_REPO / "digits_torch", root / "models" / MODEL)
    config = root / "models" / MODEL / "config.pbtxt"
    text = config.read_text().replace('name: "digits_torch"', f'name: "{MODEL}"')
    config.write_text(text[: text.index("ferry_image {")])  # tensors in, logits out
    server = start_server(root / "models", root / "server.log", "--allow-shared-memory")
    yield server
    server.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_torch_model_reads_and_writes_cuda_regions_on_the_device(gpu_server: RunningServer, protocol: str) -> None:
    cudashm = _cuda_shared_memory()
    triton = connect(protocol, gpu_server)
    client, module = triton.client, triton.module
    images = np.random.default_rng(0).random((IMAGES, 1, 28, 28), dtype=np.float32)
    prefix = f"dev_{protocol}"
    inputs_handle = cudashm.create_shared_memory_region(f"{prefix}_in", IMAGES * IMAGE, 0)
    outputs_handle = cudashm.create_shared_memory_region(f"{prefix}_out", IMAGES * LOGITS, 0)
    try:
        cudashm.set_shared_memory_region(inputs_handle, [images])
        for name, handle, size in ((f"{prefix}_in", inputs_handle, IMAGE), (f"{prefix}_out", outputs_handle, LOGITS)):
            raw = cudashm.get_raw_handle(handle)
            client.register_cuda_shared_memory(name, raw, 0, IMAGES * size)
        tensor = module.InferInput("input", [IMAGES, 1, 28, 28], "FP32")
        tensor.set_shared_memory(f"{prefix}_in", IMAGES * IMAGE)
        output = module.InferRequestedOutput("logits")
        output.set_shared_memory(f"{prefix}_out", IMAGES * LOGITS)
        client.infer(MODEL, [tensor], outputs=[output])
        written = cudashm.get_contents_as_numpy(outputs_handle, np.float32, [IMAGES, 10])

        plain = module.InferInput("input", [IMAGES, 1, 28, 28], "FP32")
        plain.set_data_from_numpy(images)
        expected = client.infer(MODEL, [plain]).as_numpy("logits")
        np.testing.assert_allclose(written, expected, rtol=TF32_TOLERANCE, atol=TF32_TOLERANCE)
    finally:
        client.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(inputs_handle)
        cudashm.destroy_shared_memory_region(outputs_handle)
