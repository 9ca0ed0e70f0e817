"""CUDA shared memory read and written on the device: an input in a CUDA region reaches the engine as
a tensor viewing the region (no host copy), batches with others there, and answers as the host
path; an output asked into a region is handed over on the device and copied into it there.

The "device" is torch's CPU device: a ``CudaWindow`` over a CPU tensor stands in for the one
``gpu.cuda_ipc`` opens from a client's ``cudaIpcMemHandle_t`` (this machine has no CUDA). The rest
is real: the TorchScript digits (and the ONNX Runtime digits, an engine reading host memory), the
model manager, the dynamic batcher, the data plane and the shared memory registry.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferry.api.dataplane import DataPlane
from ferry.api.shared_memory import SharedMemoryRegistry
from ferry.errors import InvalidArgument
from ferry.repository.manager import ControlMode, ModelManager
from ferry.types import ANONYMOUS, InferenceRequest, RequestedOutput, SharedMemoryInput, SharedMemoryRef

from ..conftest import EXTRAS_REPO, MODEL_REPO

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
from ferry.gpu.cuda_ipc import CudaWindow  # noqa: E402

from .test_device_tensor_batches import until  # noqa: E402

IMAGE = 28 * 28 * 4  # one [1, 28, 28] FP32 digit
LOGITS = 10 * 4
QUEUED = 3  # requests queued behind the gated one, which the batcher gathers into one batch
TORCH_MODEL, ONNX_MODEL = "digits_tensors", "digits_onnx_tensors"


def repository(tmp_path: Path) -> Path:
    """The TorchScript and the ONNX Runtime digits taking tensors (their image stage removed)."""
    repo = tmp_path / "models"
    for source, name, old in (
        (EXTRAS_REPO / "digits_torch", TORCH_MODEL, "digits_torch"),
        (MODEL_REPO / "digits", ONNX_MODEL, "digits"),
    ):
        shutil.copytree(source, repo / name)
        config = repo / name / "config.pbtxt"
        text = config.read_text().replace(f'name: "{old}"', f'name: "{name}"')
        config.write_text(text[: text.index("ferry_image {")])
    return repo


class CpuRegions:
    """Stands in for ``gpu.cuda_ipc.CudaIpc``: each region's device memory is a CPU tensor the test
    writes inputs into and reads outputs from."""

    def __init__(self) -> None:
        self.memory: dict[str, torch.Tensor] = {}
        self.closed: list[str] = []

    def open(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> CudaWindow:
        self.memory[name] = torch.zeros(byte_size, dtype=torch.uint8)
        closed = self.closed

        class Window(CudaWindow):
            def close(self) -> None:
                closed.append(name)
                super().close()

        return Window(self.memory[name], device_id)

    def put(self, name: str, offset: int, array: np.ndarray) -> None:
        data = torch.from_numpy(np.ascontiguousarray(array).view(np.uint8).reshape(-1).copy())
        self.memory[name][offset : offset + data.numel()] = data

    def get(self, name: str, offset: int, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape)) * 4
        return self.memory[name][offset : offset + size].numpy().view(np.float32).reshape(shape).copy()


class Engine:
    """Wraps an instance's ``compute`` and ``compute_keeping``: records what each batch's input was
    and which outputs were kept on the device, and holds the first call until released, so the
    requests that arrive meanwhile queue up behind it."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance
        self.plain, self.keeping = instance.compute, instance.compute_keeping
        self.inputs: list[Any] = []
        self.kept: list[frozenset[str]] = []
        self.entered, self.release = threading.Event(), threading.Event()
        self.release.set()
        instance.compute = lambda inputs, outputs: self._seen(inputs, frozenset()) or self.plain(inputs, outputs)
        instance.compute_keeping = lambda inputs, outputs, kept: (
            self._seen(inputs, kept) or self.keeping(inputs, outputs, kept)
        )

    def _seen(self, inputs: dict[str, Any], kept: frozenset[str]) -> None:
        self.inputs.append(inputs["input"])
        self.kept.append(kept)
        self.entered.set()
        assert self.release.wait(30), "the test never released the gate"

    def hold(self) -> None:
        self.entered.clear()
        self.release.clear()


def in_region(model: str, offset: int, images: int, output: RequestedOutput | None = None) -> InferenceRequest:
    shared = SharedMemoryInput("FP32", (images, 1, 28, 28), SharedMemoryRef("in", offset, images * IMAGE))
    return InferenceRequest(
        model, shared_memory_inputs={"input": shared}, outputs=[output or RequestedOutput("logits")]
    )


def in_body(model: str, images: np.ndarray, output: RequestedOutput | None = None) -> InferenceRequest:
    return InferenceRequest(
        model,
        inputs={"input": images},
        input_datatypes={"input": "FP32"},
        outputs=[output or RequestedOutput("logits")],
    )


@pytest.fixture
async def served(tmp_path: Path) -> Any:
    regions = CpuRegions()
    registry = SharedMemoryRegistry(cuda_ipc=regions)
    registry.register_cuda(ANONYMOUS, "in", b"\0" * 64, 0, (1 + QUEUED) * IMAGE)
    registry.register_cuda(ANONYMOUS, "out", b"\0" * 64, 0, (1 + QUEUED) * LOGITS)
    manager = ModelManager(
        repository(tmp_path), control_mode=ControlMode.EXPLICIT, startup_models=[TORCH_MODEL, ONNX_MODEL]
    )
    await manager.start()
    plane = DataPlane(manager, shared_memory=registry)
    plane.started = True
    try:
        yield plane, regions, manager
    finally:
        await manager.stop()


def logits(response: Any) -> np.ndarray:
    return np.asarray(response.outputs[0].data)


async def test_an_input_in_a_cuda_region_reaches_the_engine_as_a_view_of_it_and_batches_there(served: Any) -> None:
    plane, regions, manager = served
    images = np.random.default_rng(0).random((1 + QUEUED, 1, 28, 28), dtype=np.float32)
    regions.put("in", 0, images)
    model = manager.get(TORCH_MODEL)
    engine = Engine(model.instances[0])

    engine.hold()
    first = asyncio.ensure_future(plane.infer(in_region(TORCH_MODEL, 0, 1)))
    await until(engine.entered.is_set, "the first request computing")
    rest = [asyncio.ensure_future(plane.infer(in_region(TORCH_MODEL, (1 + i) * IMAGE, 1))) for i in range(QUEUED)]
    await until(lambda: model.scheduler.queue_size == QUEUED, f"{QUEUED} requests queued behind it")
    engine.release.set()
    answers = await asyncio.gather(first, *rest)

    # the lone request's input is the region's own memory (no copy); the queued ones are one batch
    # joined on the device: torch tensors at the engine, never numpy
    alone, batch = engine.inputs
    assert isinstance(alone, torch.Tensor) and isinstance(batch, torch.Tensor)
    assert alone.untyped_storage().data_ptr() == regions.memory["in"].untyped_storage().data_ptr()
    assert alone.data_ptr() == regions.memory["in"].data_ptr() and alone.shape == (1, 1, 28, 28)
    assert batch.shape == (QUEUED, 1, 28, 28)
    assert sorted(row.numpy().tobytes() for row in batch) == sorted(image.tobytes() for image in images[1:])

    # the same images in the request body (host memory) answer the same
    host = [await plane.infer(in_body(TORCH_MODEL, images[i : i + 1])) for i in range(1 + QUEUED)]
    assert isinstance(engine.inputs[-1], np.ndarray)
    for ours, theirs in zip(answers, host, strict=True):
        np.testing.assert_allclose(logits(ours), logits(theirs), rtol=1e-5, atol=1e-6)

    # an engine that reads host memory only (ONNX Runtime) gets the batch copied to host once
    onnx = Engine(manager.get(ONNX_MODEL).instances[0])
    on_onnx = await plane.infer(in_region(ONNX_MODEL, 0, 2))
    assert [type(x) for x in onnx.inputs] == [np.ndarray]
    np.testing.assert_allclose(logits(on_onnx), np.concatenate([logits(h) for h in host[:2]]), rtol=1e-4, atol=1e-5)


async def test_an_output_asked_into_a_cuda_region_is_written_there_from_the_device(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane, regions, manager = served
    images = np.random.default_rng(1).random((1 + QUEUED, 1, 28, 28), dtype=np.float32)
    written: list[type] = []
    write = CudaWindow.write
    monkeypatch.setattr(
        CudaWindow, "write", lambda self, start, data: written.append(type(data)) or write(self, start, data)
    )
    model = manager.get(TORCH_MODEL)
    engine = Engine(model.instances[0])
    expected = [logits(await plane.infer(in_body(TORCH_MODEL, images[i : i + 1]))) for i in range(1 + QUEUED)]

    def into_region(i: int) -> RequestedOutput:
        return RequestedOutput("logits", shared_memory=SharedMemoryRef("out", i * LOGITS, LOGITS))

    # a lone request, then a batch in which two requests ask for the output in the region and one
    # in its answer: the batch keeps it on the device, the third gets its share in host memory
    engine.hold()
    first = asyncio.ensure_future(plane.infer(in_body(TORCH_MODEL, images[:1], into_region(0))))
    await until(engine.entered.is_set, "the first request computing")
    rest = [
        asyncio.ensure_future(plane.infer(in_body(TORCH_MODEL, images[1:2], into_region(1)))),
        asyncio.ensure_future(plane.infer(in_body(TORCH_MODEL, images[2:3]))),
        asyncio.ensure_future(plane.infer(in_body(TORCH_MODEL, images[3:4], into_region(3)))),
    ]
    await until(lambda: model.scheduler.queue_size == len(rest), "the others queued")
    engine.release.set()
    answers = await asyncio.gather(first, *rest)

    assert engine.kept[-2:] == [frozenset({"logits"}), frozenset({"logits"})]
    assert written == [torch.Tensor] * 3  # handed over on the device, never as host bytes
    for i in (0, 1, 3):
        np.testing.assert_allclose(regions.get("out", i * LOGITS, (1, 10)), expected[i], rtol=1e-5, atol=1e-6)
        assert answers[i].outputs[0].shared_memory == {
            "shared_memory_region": "out",
            "shared_memory_byte_size": LOGITS,
            **({"shared_memory_offset": i * LOGITS} if i else {}),
        }
    assert isinstance(answers[2].outputs[0].data, np.ndarray)
    np.testing.assert_allclose(answers[2].outputs[0].data, expected[2], rtol=1e-5, atol=1e-6)
    assert not regions.memory["out"][2 * LOGITS : 3 * LOGITS].any()  # its share was not written there

    # an engine that makes its outputs in host memory: they are copied into the region as bytes
    await plane.infer(in_body(ONNX_MODEL, images[:1], into_region(2)))
    assert written[-1] is memoryview
    np.testing.assert_allclose(regions.get("out", 2 * LOGITS, (1, 10)), expected[0], rtol=1e-4, atol=1e-5)


async def test_a_region_unregistered_while_its_request_computes_stays_until_the_request_ends(served: Any) -> None:
    plane, regions, manager = served
    images = np.random.default_rng(2).random((1, 1, 28, 28), dtype=np.float32)
    regions.put("in", 0, images)
    engine = Engine(manager.get(TORCH_MODEL).instances[0])
    expected = logits(await plane.infer(in_body(TORCH_MODEL, images)))

    engine.hold()
    request = asyncio.ensure_future(plane.infer(in_region(TORCH_MODEL, 0, 1)))
    await until(engine.entered.is_set, "the request computing on a view of the region")
    plane.shared_memory.unregister(ANONYMOUS, "in", cuda=True)
    assert [r["name"] for r in plane.shared_memory.status(ANONYMOUS, cuda=True)] == ["in", "out"]  # held
    assert regions.closed == []
    engine.release.set()
    np.testing.assert_allclose(logits(await request), expected, rtol=1e-5, atol=1e-6)
    assert [r["name"] for r in plane.shared_memory.status(ANONYMOUS, cuda=True)] == ["out"]
    assert regions.closed == ["in"]


@pytest.mark.parametrize(
    ("offset", "byte_size", "message"),
    [
        (0, IMAGE - 4, "input byte size mismatch for input 'input'"),
        ((1 + QUEUED) * IMAGE, IMAGE, "Invalid offset for shared memory region: 'in'"),
        (QUEUED * IMAGE + 4, IMAGE, "Invalid offset + byte size for shared memory region: 'in'"),
    ],
    ids=["size-not-the-shapes", "offset-past-the-region", "window-past-the-region"],
)
async def test_bad_windows_are_refused_before_any_view_or_copy(
    served: Any, monkeypatch: pytest.MonkeyPatch, offset: int, byte_size: int, message: str
) -> None:
    plane, _, manager = served
    touched: list[str] = []
    for method in ("tensor", "read"):
        original = getattr(CudaWindow, method)
        monkeypatch.setattr(
            CudaWindow, method, lambda self, *args, _m=method, _o=original: touched.append(_m) or _o(self, *args)
        )
    engine = Engine(manager.get(TORCH_MODEL).instances[0])
    shared = SharedMemoryInput("FP32", (1, 1, 28, 28), SharedMemoryRef("in", offset, byte_size))
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        await plane.infer(InferenceRequest(TORCH_MODEL, shared_memory_inputs={"input": shared}))
    assert touched == [] and engine.inputs == []


def test_a_window_views_its_memory_and_copies_only_a_misaligned_input() -> None:
    memory = torch.arange(64, dtype=torch.uint8)
    window = CudaWindow(memory, 0)
    view = window.tensor(8, 16, "INT32", (2, 2))
    assert view is not None and view.dtype == torch.int32 and view.shape == (2, 2)
    assert view.data_ptr() == memory.data_ptr() + 8  # the region's own bytes
    misaligned = window.tensor(2, 8, "INT32", (2,))
    assert misaligned is not None and misaligned.data_ptr() != memory.data_ptr() + 2
    assert misaligned.numpy().tobytes() == bytes(range(2, 10))
    assert window.tensor(0, 8, "BYTES", (1,)) is None  # BYTES has no tensor type: read copies it out
    window.write(60, torch.tensor([7], dtype=torch.int32))
    assert memory[60:64].tolist() == [7, 0, 0, 0]
