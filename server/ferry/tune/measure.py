"""One round of one candidate: load it, then run ``ferry-client perf``'s engine at each load level.

The same worker processes, windows and percentiles as ``ferry-client perf``; the server's own
statistics (queue and compute time, executed batch sizes) are read before and after each level,
the server's CPU use from its process, and GPU use from NVML where it is present.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ferry_client.perf.inputs import (
    datatype_overrides,
    file_samples,
    image_samples,
    model_inputs,
    random_samples,
)
from ferry_client.perf.runner import StepPlan, WorkerPool, default_processes, run_step
from ferry_client.perf.server_stats import breakdown, totals
from ferry_client.perf.wire import Security, default_grpc_engine, encode_requests
from ferry_client.perf.worker import WorkerConfig

from .candidates import Candidate
from .objective import PERCENTILES, GpuUse, Point, Sample
from .runner import TuningError, TuningServer


@dataclass(frozen=True)
class LoadPlan:
    """The load each candidate is measured under."""

    mode: str  # "concurrency" (closed loop) or "rate" (open loop, requests/s)
    levels: tuple[float, ...]
    window_s: float = 1.0
    warmup_s: float = 0.5
    input_data: Path | None = None  # None: random tensors; a folder of images or a tensor file


def batch_histogram(before: Mapping[str, Any], after: Mapping[str, Any], model: str) -> dict[int, int]:
    """Executions per batch size between two statistics snapshots."""

    def counts(stats: Mapping[str, Any]) -> dict[int, int]:
        result: dict[int, int] = {}
        for entry in stats.get("model_stats", []):
            if entry.get("name") != model:
                continue
            for row in entry.get("batch_stats", []):
                size = int(row["batch_size"])
                result[size] = result.get(size, 0) + int(row.get("compute_infer", {}).get("count", 0))
        return result

    first, last = counts(before), counts(after)
    return {size: count - first.get(size, 0) for size, count in sorted(last.items()) if count > first.get(size, 0)}


class GpuSampler:
    """Averages NVML utilisation, memory and power over a measurement, on a background thread."""

    def __init__(self) -> None:
        self._nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml if self._handles else None
        except Exception:  # no library, driver or device: GPU columns stay empty
            self._nvml = None

    @property
    def present(self) -> bool:
        return self._nvml is not None

    def during(self, work: Callable[[], Any]) -> tuple[Any, GpuUse | None]:
        if self._nvml is None:
            return work(), None
        readings: list[tuple[float, int, float]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.2):
                util = memory = power = 0.0
                for handle in self._handles:
                    util += self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100
                    memory += self._nvml.nvmlDeviceGetMemoryInfo(handle).used
                    power += self._nvml.nvmlDeviceGetPowerUsage(handle) / 1000
                readings.append((util / len(self._handles), int(memory), power))

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            result = work()
        finally:
            stop.set()
            thread.join()
        if not readings:
            return result, None
        count = len(readings)
        return result, GpuUse(
            sum(r[0] for r in readings) / count, max(r[1] for r in readings), sum(r[2] for r in readings) / count
        )


def _quiet(line: str) -> None:
    """perf's progress lines: the tuner prints its own."""


def _cpu_seconds(process: psutil.Process) -> float:
    """CPU time of the server and its children (intake processes)."""
    total = 0.0
    for proc in [process, *process.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


class Measurer:
    """Measures candidates; one server per image pool size, one pool of perf workers per server and model."""

    def __init__(self, server: TuningServer, plan: LoadPlan, start: Callable[[int], TuningServer]) -> None:
        self._servers = {0: server}
        self._start = start  # starts a server with another image pool size
        self.plan = plan
        self._pools: dict[tuple[int, str], WorkerPool] = {}
        self.gpu = GpuSampler()
        self._step = StepPlan(window_s=plan.window_s, warmup_s=plan.warmup_s, max_windows=1)
        self._seed = 0
        self.load_errors: dict[Candidate, str] = {}

    def prepare(self, model: str) -> None:
        """Start the load workers for ``model`` now, so their start-up is not taken for measuring time."""
        self._pool(self._servers[0], 0, model)

    def _server(self, image_workers: int) -> TuningServer:
        if image_workers not in self._servers:
            self._servers[image_workers] = self._start(image_workers)
        return self._servers[image_workers]

    def _pool(self, server: TuningServer, image_workers: int, model: str) -> WorkerPool:
        key = (image_workers, model)
        if key not in self._pools:
            client = server.client
            specs, batched = model_inputs(client.model_metadata(model), client.model_config(model))
            source = self.plan.input_data
            if source is None:
                samples = random_samples(specs, batched, 1, {})
            elif source.is_dir():
                samples = image_samples(source, specs, batched, 1)
            else:
                samples = file_samples(source, specs, batched, 1, {})
            requests = encode_requests("http", model, "", samples, datatype_overrides(samples, specs))
            largest = max(self.plan.levels)
            config = WorkerConfig(
                "http",
                server.url,
                model,
                "",
                requests,
                Security(),
                connections=int(largest) if self.plan.mode == "concurrency" else 1024,
                grpc_engine=default_grpc_engine(),
            )
            self._pools[key] = WorkerPool(config, default_processes(largest, self.plan.mode))
        return self._pools[key]

    def __call__(self, candidate: Candidate) -> Sample:
        try:
            server = self._server(candidate.image_workers)
            server.use(candidate)
        except TuningError as exc:  # a candidate that does not load counts as failed, the search goes on
            self.load_errors[candidate] = str(exc)
            nan = math.nan
            return tuple(Point(level, 0.0, dict.fromkeys(PERCENTILES, nan), failures=1) for level in self.plan.levels)
        pool = self._pool(server, candidate.image_workers, candidate.model)
        process = psutil.Process(server.process.pid)
        client = server.client
        points = []
        for level in self.plan.levels:
            self._seed += 1
            before = client.model_statistics(candidate.model)
            cpu_before = _cpu_seconds(process)
            started = time.monotonic()
            step, gpu = self.gpu.during(
                functools.partial(run_step, pool, self.plan.mode, level, self._step, self._seed, None, _quiet)
            )
            elapsed = time.monotonic() - started
            cpu = _cpu_seconds(process) - cpu_before
            after = client.model_statistics(candidate.model)
            stats = breakdown(totals(before, candidate.model), totals(after, candidate.model))
            w = step.client
            points.append(
                Point(
                    load=level,
                    throughput=w.throughput,
                    latency_ms={q: getattr(w, f"p{q}_us") / 1e3 for q in PERCENTILES},
                    failures=step.client_failures,
                    queue_us=stats.queue_us,
                    compute_us=stats.compute_input_us + stats.compute_infer_us + stats.compute_output_us,
                    batches=batch_histogram(before, after, candidate.model),
                    cpu_cores=cpu / elapsed,
                    gpu=gpu,
                )
            )
        return tuple(points)

    def close(self) -> None:
        """Stop the load workers and the servers this measurer started (not the first one)."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        for image_workers, server in list(self._servers.items()):
            if image_workers:
                server.stop()
                del self._servers[image_workers]
