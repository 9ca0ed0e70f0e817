"""ONNX Runtime's CPU arena gives back what one large run grew it by (issue 24: a client's burst of
large tensors left the server 140-160 MB bigger for good)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil
import pytest

from ferry import heap
from ferry.backends import onnxruntime as ort_backend
from ferry.backends.base import InstanceSpec
from ferry.repository.config import read_config_file

REPO = Path(__file__).resolve().parents[2] / "model_repo"
LARGE = 40 * 2**20 // 4  # FP32 elements: a 40 MiB input, and as large an output


def _grown_after_one_large_run(threshold: int, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(ort_backend, "SHRINK_ARENA_AFTER_BYTES", threshold)
    heap.return_large_buffers()  # as the server does at start: freed large buffers leave the heap
    config = read_config_file(REPO / "dynamic_shape")
    assert config is not None
    instance = ort_backend.OnnxRuntimeInstance(
        REPO / "dynamic_shape" / "1" / "model.onnx", config, InstanceSpec("c", "CPU", threads=1)
    )
    small = np.ones((1, 16), np.float32)
    instance.compute({"x": small}, ["y"])  # the arena's first chunk, before measuring
    process = psutil.Process()
    before = process.memory_info().rss
    out = instance.compute({"x": np.ones((1, LARGE), np.float32)}, ["y"])
    assert out["y"][0, 0] == 3.0
    del out  # the answer is the caller's; what is left is the arena's
    return process.memory_info().rss - before


def test_a_large_run_gives_the_arena_growth_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """What stays is the chunk of the output, still alive when the run ends (40 MiB here; the next
    large run reuses it); the rest of what the run grew the arena by is given back."""
    assert _grown_after_one_large_run(ort_backend.SHRINK_ARENA_AFTER_BYTES, monkeypatch) < 48 * 2**20


def test_without_shrinking_the_arena_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The condition the fix removes, established: ORT keeps the run's memory when not told to shrink."""
    assert _grown_after_one_large_run(2**62, monkeypatch) > 64 * 2**20  # about 80 MiB: two 40 MiB chunks
