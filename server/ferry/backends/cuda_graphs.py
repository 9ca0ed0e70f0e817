"""CUDA graphs for a batched model: one graph per batch-size bucket, a batch padded to its bucket.

Replaying a captured graph launches the whole forward pass with one call, which removes the
per-kernel launch cost that dominates small batches. A graph runs on fixed addresses, so each
bucket reads from static device inputs (views of the largest bucket's buffers) and writes to
outputs allocated during its capture. There are two such sets of inputs, outputs and graphs
(double buffering), used in turn (``Alternation``): a batch's inputs are copied on a copy stream
into the set the previous batch did not use, after that set's last replay has read it (an event),
and the replay waits for the copy (another event). So the next batch's host-to-device copy can run
while the current batch computes, and the current batch's outputs are not overwritten by the next
replay before they are copied out. The scheduler launches an instance's next batch before the
current one is finished (``PyTorchInstance.launch`` / ``finish``), so the copy does overlap.
All graphs of an instance share one memory pool and are replayed on the instance's stream, one
at a time, which is what makes sharing the pool safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch

from ..gpu.setup_lock import CUDA_SETUP_LOCK
from .torch_options import bucket_for

log = logging.getLogger(__name__)

Forward = Callable[[list[torch.Tensor]], dict[str, torch.Tensor]]


class Alternation:
    """Which of ``sets`` buffer sets the next batch uses: each in turn, so two successive batches
    never share one."""

    def __init__(self, sets: int) -> None:
        if sets < 1:
            raise ValueError("at least one buffer set")
        self.sets = sets
        self._next = 0

    def take(self) -> int:
        chosen = self._next
        self._next = (chosen + 1) % self.sets
        return chosen


class GraphSet:
    """One set of static inputs (the largest bucket's) with a graph per bucket and its outputs."""

    def __init__(self, inputs: list[torch.Tensor]) -> None:
        self.inputs = inputs
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor]]] = {}
        self.read = torch.cuda.Event()  # recorded after this set's last replay: its inputs are free after it

    def views(self, size: int) -> list[torch.Tensor]:
        return [tensor[:size] for tensor in self.inputs]


class CudaGraphs:
    """Captured graphs keyed by bucket, in ``sets`` sets; ``compute`` copies a host batch in, replays,
    returns device outputs."""

    def __init__(
        self,
        forward: Forward,
        inputs: Sequence[tuple[tuple[int, ...], torch.dtype]],
        buckets: Sequence[int],
        device: torch.device,
        stream: torch.cuda.Stream,
        warmup_runs: int = 3,
        sets: int = 2,
    ) -> None:
        self.buckets = tuple(sorted(buckets))
        largest = self.buckets[-1]
        self.sets = [
            GraphSet([torch.zeros((largest, *dims), dtype=dtype, device=device) for dims, dtype in inputs])
            for _ in range(sets)
        ]
        self.alternation = Alternation(sets)
        self._copies = torch.cuda.Stream(device)  # host-to-device copies, beside the instance's compute stream
        stream.wait_stream(torch.cuda.current_stream(device))  # the inputs were zeroed on the current stream
        pool = None
        for size in reversed(self.buckets):  # largest first: later captures reuse its pool blocks
            for graphs in self.sets:
                # Warm up this very shape on the capture stream just before capturing it: cuDNN/cuBLAS
                # choose algorithms and allocate workspaces lazily, and TorchScript's profiling executor
                # specialises per shape after a few runs; none of that may happen during capture.
                with torch.cuda.stream(stream):
                    for _ in range(warmup_runs):
                        forward(graphs.views(size))
                stream.synchronize()
                graph = torch.cuda.CUDAGraph()
                # Thread-local capture: in the default (global) mode any other thread's unsafe CUDA call
                # fails while this capture runs, and a server loads other models and serves other
                # instances meanwhile. On the H100, a second model's torch.jit.load to the GPU failed
                # with "operation not permitted when stream is capturing" (benchmarks/gpu_torch.py, 2
                # instances).
                with (
                    CUDA_SETUP_LOCK,
                    torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"),
                ):
                    outputs = forward(graphs.views(size))
                pool = graph.pool()
                graphs.graphs[size] = (graph, outputs)
        for graphs in self.sets:
            graphs.read.record(stream)
        stream.synchronize()

    def bucket(self, batch: int) -> int | None:
        return bucket_for(self.buckets, batch)

    def accepts(self, host_inputs: Sequence[torch.Tensor], batch: int) -> bool:
        """Whether a batch fits a bucket and has the captured dims and types (else it runs eagerly)."""
        return self.bucket(batch) is not None and all(
            host.shape[1:] == static.shape[1:] and host.dtype == static.dtype
            for host, static in zip(host_inputs, self.sets[0].inputs, strict=True)
        )

    def compute(
        self, host_inputs: Sequence[torch.Tensor], batch: int, after: torch.cuda.Stream | None = None
    ) -> dict[str, torch.Tensor]:
        """Replay the bucket for ``batch`` on the current stream, in the next set; returns views of the
        first ``batch`` rows of that set's outputs. Inputs on the device already are copied device to
        device, once the stream ``after`` that made them has (a device pre-processor's batch).

        Rows past ``batch`` hold whatever an earlier batch left there; their results are discarded.
        The returned views are overwritten by the replay after next (the other set's comes between),
        so copy them out before that.
        """
        size = self.bucket(batch)
        if size is None:
            raise ValueError(f"batch {batch} is larger than the largest CUDA graph bucket {self.buckets[-1]}")
        graphs = self.sets[self.alternation.take()]
        compute = torch.cuda.current_stream()
        self._copies.wait_event(graphs.read)  # the set's previous replay has read its inputs
        if after is not None:
            self._copies.wait_stream(after)
        with torch.cuda.stream(self._copies):
            for static, host in zip(graphs.inputs, host_inputs, strict=True):
                static[:batch].copy_(host, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._copies)
        compute.wait_event(copied)
        graph, outputs = graphs.graphs[size]
        graph.replay()
        graphs.read.record(compute)
        return {name: tensor[:batch] for name, tensor in outputs.items()}
