"""Reused host buffers of the GPU paths (``gpu/host_buffers.py``), run on plain memory where CUDA is absent."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
from ferry.backends.torch_loading import to_numpy  # noqa: E402
from ferry.gpu.host_buffers import HostBuffers  # noqa: E402

pytestmark = pytest.mark.torch


def test_outputs_are_copied_through_one_reused_buffer_per_output() -> None:
    """The code path of a GPU instance's results (``_compute_cuda``), with a plain buffer where pinning is
    unavailable: every batch lands in the same buffer (grown once for a larger batch), and each
    answer, copied out, is not overwritten by the next batch."""
    outputs = HostBuffers(pinned=False)

    def collect(view: torch.Tensor) -> np.ndarray:
        return to_numpy(view).copy()

    first = collect(outputs.stage("logits", torch.arange(6.0).view(2, 3)))
    buffer = outputs.buffer("logits")
    assert buffer is not None
    view = outputs.stage("logits", torch.full((1, 3), 7.0))
    assert outputs.buffer("logits") is buffer and view.data_ptr() == buffer.data_ptr()
    second = collect(view)
    outputs.stage("logits", torch.zeros(2, 3))
    np.testing.assert_array_equal(first, np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(second, np.full((1, 3), 7.0))
    grown = collect(outputs.stage("logits", torch.ones(4, 3, dtype=torch.float64)))
    assert outputs.buffer("logits") is not buffer and grown.dtype == np.float64 and grown.shape == (4, 3)


def test_a_batch_above_the_retained_size_gets_a_buffer_of_its_own() -> None:
    """A pre-processor lane keeps at most ``retain_bytes``: one huge request does not pin memory for ever."""
    buffers = HostBuffers(pinned=False, retain_bytes=64)
    kept = buffers.take("upload", 64)
    assert buffers.buffer("upload") is not None and kept.data_ptr() == buffers.buffer("upload").data_ptr()
    big = buffers.take("upload", 65)
    assert big.numel() == 65 and big.data_ptr() != kept.data_ptr() and buffers.buffer("upload").numel() == 64
