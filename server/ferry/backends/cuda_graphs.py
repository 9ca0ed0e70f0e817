"""CUDA graphs for a batched model: one graph per batch-size bucket, a batch padded to its bucket.

Replaying a captured graph launches the whole forward pass with one call, which removes the
per-kernel launch cost that dominates small batches. A graph runs on fixed addresses, so every
bucket reads from one set of static device inputs (views of the largest bucket's buffers) and
writes to outputs allocated during its capture. Graphs of one instance share a memory pool and are
replayed one at a time on the instance's stream, which is what makes sharing the pool safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch

from ..gpu.setup_lock import CUDA_SETUP_LOCK
from .torch_options import bucket_for

log = logging.getLogger(__name__)

Forward = Callable[[list[torch.Tensor]], dict[str, torch.Tensor]]


class CudaGraphs:
    """Captured graphs keyed by bucket; ``compute`` copies a host batch in, replays, returns device outputs."""

    def __init__(
        self,
        forward: Forward,
        inputs: Sequence[tuple[tuple[int, ...], torch.dtype]],
        buckets: Sequence[int],
        device: torch.device,
        stream: torch.cuda.Stream,
        warmup_runs: int = 3,
    ) -> None:
        self.buckets = tuple(sorted(buckets))
        largest = self.buckets[-1]
        self.static_inputs = [torch.zeros((largest, *dims), dtype=dtype, device=device) for dims, dtype in inputs]
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor]]] = {}
        stream.wait_stream(torch.cuda.current_stream(device))  # the inputs were zeroed on the current stream
        pool = None
        for size in reversed(self.buckets):  # largest first: later captures reuse its pool blocks
            # Warm up this very shape on the capture stream just before capturing it: cuDNN/cuBLAS
            # choose algorithms and allocate workspaces lazily, and TorchScript's profiling executor
            # specialises per shape after a few runs; none of that may happen during capture.
            with torch.cuda.stream(stream):
                for _ in range(warmup_runs):
                    forward(self._views(size))
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            # Thread-local capture: in the default (global) mode any other thread's unsafe CUDA call
            # fails while this capture runs, and a server loads other models and serves other
            # instances meanwhile. On the H100, a second model's torch.jit.load to the GPU failed with
            # "operation not permitted when stream is capturing" (benchmarks/gpu_torch.py, 2 instances).
            with CUDA_SETUP_LOCK, torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                outputs = forward(self._views(size))
            pool = graph.pool()
            self._graphs[size] = (graph, outputs)
        stream.synchronize()

    def _views(self, size: int) -> list[torch.Tensor]:
        return [tensor[:size] for tensor in self.static_inputs]

    def bucket(self, batch: int) -> int | None:
        return bucket_for(self.buckets, batch)

    def accepts(self, host_inputs: Sequence[torch.Tensor], batch: int) -> bool:
        """Whether a batch fits a bucket and has the captured dims and types (else it runs eagerly)."""
        return self.bucket(batch) is not None and all(
            host.shape[1:] == static.shape[1:] and host.dtype == static.dtype
            for host, static in zip(host_inputs, self.static_inputs, strict=True)
        )

    def compute(self, host_inputs: Sequence[torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        """Replay the bucket for ``batch`` on the current stream; returns views of the first ``batch`` rows.

        Rows past ``batch`` hold whatever an earlier batch left there; their results are discarded.
        The returned views are overwritten by the next replay, so copy them out before that.
        """
        size = self.bucket(batch)
        if size is None:
            raise ValueError(f"batch {batch} is larger than the largest CUDA graph bucket {self.buckets[-1]}")
        for static, host in zip(self.static_inputs, host_inputs, strict=True):
            static[:batch].copy_(host, non_blocking=True)
        graph, outputs = self._graphs[size]
        graph.replay()
        return {name: tensor[:batch] for name, tensor in outputs.items()}
