"""Tensors that stay on the device: a model that pre-processes on its device (``preprocess { device:
GPU }``) has its images decoded per request and pre-processed once per gathered batch by the batcher
(``Memory.PIXELS``), the batch a torch tensor on the device that the torch engine reads as it is;
outputs come back to host memory once per batch. The device is torch's CPU device here
(``_gpu_preprocessor`` is pointed at it: this machine has no CUDA); the real TorchScript digits
model, the real model manager and data plane, the digits' held-out images."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferry.api.dataplane import DataPlane
from ferry.backends.base import Instance, InstanceSpec, ModelIO
from ferry.repository.manager import ControlMode, ModelManager
from ferry.scheduling.interface import Execution, Memory
from ferry.scheduling.policy import SchedulingPolicy
from ferry.scheduling.scheduler import Scheduler, batch_signature
from ferry.statistics import ModelStats

from ..conftest import EXTRAS_REPO, MODEL_REPO

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
from ferry.gpu import device_tensors  # noqa: E402
from ferry.pipelines import runtime  # noqa: E402
from ferry.pipelines.device_preprocess import DevicePreprocessor  # noqa: E402

QUEUED = 3  # requests queued behind the gated one, which the batcher then gathers into one batch
IMAGES_PER_REQUEST = 2


def repository(tmp_path: Path) -> Path:
    """digits_torch pre-processing on its device, and the same model pre-processing with Pillow."""
    repo = tmp_path / "models"
    for name, device in (("digits_device", " device: GPU"), ("digits_host", "")):
        shutil.copytree(EXTRAS_REPO / "digits_torch", repo / name)
        config = repo / name / "config.pbtxt"
        text = config.read_text().replace('name: "digits_torch"', f'name: "{name}"')
        config.write_text(text.replace("scale: 0.0039215686 }", f"scale: 0.0039215686{device} }}"))
    # the ONNX Runtime digits (an engine that reads host memory only) pre-processing on the device
    shutil.copytree(MODEL_REPO / "digits", repo / "digits_onnx_device")
    config = repo / "digits_onnx_device" / "config.pbtxt"
    text = config.read_text().replace('name: "digits"', 'name: "digits_onnx_device"')
    config.write_text(text.replace("scale: 0.0039215686 }", "scale: 0.0039215686 device: GPU }"))
    return repo


class Gate:
    """Wraps an instance's ``compute``: records the inputs' types and batch sizes, and holds the
    first call until released, so the requests that arrive meanwhile queue up behind it."""

    def __init__(self, instance: Any) -> None:
        self.compute = instance.compute
        self.seen: list[tuple[type, int]] = []
        self.values: list[np.ndarray] = []  # each batch's input as the engine got it
        self.entered = threading.Event()
        self.release = threading.Event()
        instance.compute = self

    def __call__(self, inputs: dict[str, Any], outputs: list[str]) -> dict[str, np.ndarray]:
        tensor = inputs["input"]
        self.seen.append((type(tensor), int(tensor.shape[0])))
        self.values.append(tensor.numpy().copy() if isinstance(tensor, torch.Tensor) else tensor.copy())
        self.entered.set()
        assert self.release.wait(30), "the test never released the gate"
        return self.compute(inputs, outputs)


async def until(condition: Any, what: str) -> None:
    """Wait (on the loop, bounded) for a condition the test itself brings about."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


async def gated(
    plane: DataPlane, gate: Gate, queued: Any, requests: list[list[bytes]], model: str = "digits_device"
) -> list[Any]:
    """The first request computing alone while the others queue, then the others as one batch."""
    gate.entered.clear()
    gate.release.clear()
    first = asyncio.ensure_future(plane.serve_images(model, "", requests[0], "classify", {}))
    await until(gate.entered.is_set, "the first request computing")
    rest = [asyncio.ensure_future(plane.serve_images(model, "", images, "classify", {})) for images in requests[1:]]
    await until(lambda: queued() == len(rest), f"{len(rest)} requests queued behind it")
    gate.release.set()
    return [result for _, results in await asyncio.gather(first, *rest) for result in results]


async def test_a_device_batch_reaches_the_engine_as_device_tensors_and_answers_as_the_host_path(
    tmp_path: Path, digit_pngs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_gpu_preprocessor", lambda spec, gpu: DevicePreprocessor(spec, "cpu"))
    preprocessed, copied_to_host = [], []  # images per pre-processor call; copies to host
    preprocess, to_host = DevicePreprocessor.__call__, device_tensors.to_host

    def counted(self: DevicePreprocessor, images: Any, placements: Any, on_device: bool = False) -> Any:
        preprocessed.append(len(images))
        return preprocess(self, images, placements, on_device)

    monkeypatch.setattr(DevicePreprocessor, "__call__", counted)
    monkeypatch.setattr(device_tensors, "to_host", lambda inputs: copied_to_host.append(1) or to_host(inputs))
    files = digit_pngs[0][: 1 + QUEUED * IMAGES_PER_REQUEST]
    requests = [files[:1]] + [
        files[1 + i * IMAGES_PER_REQUEST : 1 + (i + 1) * IMAGES_PER_REQUEST] for i in range(QUEUED)
    ]
    models = ["digits_device", "digits_host", "digits_onnx_device"]
    manager = ModelManager(repository(tmp_path), control_mode=ControlMode.EXPLICIT, startup_models=models)
    await manager.start()
    plane = DataPlane(manager)
    plane.started = True
    try:
        model = manager.get("digits_device")
        scheduler = model.scheduler
        assert isinstance(scheduler, Scheduler)
        gate = Gate(model.instances[0])
        answers = await gated(plane, gate, lambda: scheduler.queue_size, requests)

        # one lone request, then the queued ones as one batch, all torch tensors at the engine
        batch = QUEUED * IMAGES_PER_REQUEST
        assert gate.seen == [(torch.Tensor, 1), (torch.Tensor, batch)]
        assert preprocessed == [1, batch]  # once per batch: the queued requests' images in one call
        assert copied_to_host == []  # the torch engine read them where they were

        # the same batches through host memory (the scheduler made to refuse device tensors: the
        # pre-processor copies its output back as numpy, the batcher concatenates numpy) answer the same
        monkeypatch.setattr(scheduler, "takes_device_inputs", False)
        through_host = await gated(plane, gate, lambda: scheduler.queue_size, requests)
        assert gate.seen[2:] == [(np.ndarray, 1), (np.ndarray, batch)]
        assert preprocessed[2:] == [1, *[IMAGES_PER_REQUEST] * QUEUED]  # per request (slice), as before
        for device, host in zip(gate.values[:2], gate.values[2:], strict=True):
            # the engine got exactly the same images (the queued requests may have queued in another order)
            assert sorted(row.tobytes() for row in device) == sorted(row.tobytes() for row in host)
        # (TorchScript's profiling executor optimises the graph after its first runs: the last digits of
        # the scores may move from one run to the next, whatever memory the inputs came from)
        for ours, theirs in zip(answers, through_host, strict=True):
            assert [a["index"] for a in ours] == [t["index"] for t in theirs]
            assert [a["score"] for a in ours] == pytest.approx([t["score"] for t in theirs], rel=1e-5, abs=1e-7)
        # and as Pillow's pre-processing does, within the resize's rounding (a pixel level)
        _, pillow = await plane.serve_images("digits_host", "", files, "classify", {})
        assert [a[0]["index"] for a in answers] == [p[0]["index"] for p in pillow]
        for ours, theirs in zip(answers, pillow, strict=True):
            assert ours[0]["score"] == pytest.approx(theirs[0]["score"], abs=0.02)

        # an engine that reads host memory only (ONNX Runtime) gets each batch, pre-processed once on
        # the device, copied to host once
        onnx = manager.get("digits_onnx_device")
        onnx_gate = Gate(onnx.instances[0])
        del preprocessed[:]
        on_onnx = await gated(plane, onnx_gate, lambda: onnx.scheduler.queue_size, requests, "digits_onnx_device")
        assert onnx_gate.seen == [(np.ndarray, 1), (np.ndarray, batch)]
        assert preprocessed == [1, batch] and len(copied_to_host) == 2
        assert [a[0]["index"] for a in on_onnx] == [a[0]["index"] for a in answers]
    finally:
        await manager.stop()


def test_device_and_host_executions_never_share_a_batch() -> None:
    host = {"input": np.zeros((2, 1, 28, 28), dtype=np.float32)}
    device = {"input": torch.zeros((2, 1, 28, 28), dtype=torch.float32)}
    assert batch_signature(device, True, Memory.DEVICE) != batch_signature(host, True)
    assert batch_signature(device, True, Memory.DEVICE) == batch_signature(
        {"input": torch.ones((5, 1, 28, 28))}, True, Memory.DEVICE
    )


class DeviceInstance(Instance):
    """A scheduler unit test's engine: doubles ``x`` (host arrays or torch tensors), holds each run
    until ``gate`` opens, records what it was given; its outputs come back as numpy."""

    def __init__(self, takes_device_inputs: bool) -> None:
        self.spec = InstanceSpec(name="fake", kind="CPU")
        self.io = ModelIO([], [])
        self.device = "cpu"
        self.takes_device_inputs = takes_device_inputs
        self.gate = threading.Event()
        self.started = threading.Event()
        self.seen: list[Any] = []

    def compute(self, inputs: dict[str, Any], outputs: list[str]) -> dict[str, np.ndarray]:
        self.started.set()
        assert self.gate.wait(30)
        x = inputs["x"]
        self.seen.append(x)
        doubled = x * 2
        return {"y": doubled.numpy() if isinstance(doubled, torch.Tensor) else doubled}

    def close(self) -> None:
        pass


@pytest.mark.parametrize("takes", [True, False], ids=["engine-takes-device", "engine-reads-host"])
async def test_the_batcher_joins_device_tensors_on_the_device(takes: bool) -> None:
    instance = DeviceInstance(takes)
    scheduler = Scheduler("m", [instance], ModelStats("m", "1"), SchedulingPolicy(max_batch_size=8, dynamic=True))
    scheduler.start()
    parts = [torch.full((rows, 3), float(value)) for value, rows in ((1, 1), (2, 2), (3, 1), (4, 3))]

    def submitted(tensor: Any) -> asyncio.Future:
        execution = Execution({"x": tensor}, ["y"], len(tensor), memory=Memory.DEVICE)
        return asyncio.ensure_future(scheduler.submit(execution))

    try:
        first = submitted(parts[0])
        await until(instance.started.is_set, "the first execution computing")
        rest = [submitted(part) for part in parts[1:]]
        await until(lambda: scheduler.queue_size == len(rest), "the others queued")
        instance.gate.set()
        results = await asyncio.gather(first, *rest)
    finally:
        await scheduler.stop()
    kind = torch.Tensor if takes else np.ndarray
    assert [type(x) for x in instance.seen] == [kind, kind]
    gathered = instance.seen[1]
    np.testing.assert_array_equal(np.asarray(gathered), torch.cat(parts[1:]).numpy())  # one batch, in order
    for part, result in zip(parts, results, strict=True):
        np.testing.assert_array_equal(result["y"], part.numpy() * 2)
