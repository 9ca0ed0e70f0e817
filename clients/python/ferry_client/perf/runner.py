"""The coordinator: starts worker processes, runs each step of the sweep, cuts windows, decides.

A step runs until the last three windows agree (throughput and p50 within the stability
tolerance) or its trial/time limits; its figures are those of the last three windows merged.
The server's statistics are read before and after every step, so each step also reports the
server-side queue/compute breakdown and how many requests the server counted.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from typing import Any, TextIO

import numpy as np

from . import server_stats
from .measure import WindowStats, is_stable, split_windows, window_stats
from .worker import FLUSH_S, Load, WorkerConfig, worker_main

STABLE_WINDOWS = 3


@dataclass(frozen=True)
class StepPlan:
    """How each step is measured."""

    window_s: float = 5.0
    warmup_s: float = 1.0
    stability: float = 0.10
    max_windows: int = 10
    time_limit_s: float = 120.0
    distribution: str = "poisson"
    max_outstanding: int = 1024


#: A worker process using this much of one core is saturated (one interpreter cannot use more).
CLIENT_LIMIT_CPU = 0.9


@dataclass
class StepResult:
    mode: str  # "concurrency" or "rate"
    value: float
    client: WindowStats
    windows: list[WindowStats]
    stable: bool
    client_requests: int  # every success the workers saw in the step, warm-up and drain included
    client_failures: int
    delayed: int
    failures: dict[str, int]
    client_cpu: float  # busiest worker's CPU use, as a fraction of one core
    server: server_stats.ServerBreakdown | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    client_cores: float = 0.0  # all workers' CPU use together, in cores (taken from a server on the same host)

    @property
    def client_limited(self) -> bool:
        """A worker ran near a full core: the tool, not the server, set the pace of this step."""
        return self.client_cpu >= CLIENT_LIMIT_CPU

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "value": self.value,
            "stable": self.stable,
            **self.client.as_dict(),
            "client_requests": self.client_requests,
            "client_failures": self.client_failures,
            "delayed": self.delayed,
            "failures": self.failures,
            "client_cpu": self.client_cpu,
            "client_cores": self.client_cores,
            "client_limited": self.client_limited,
            "windows": [w.as_dict() for w in self.windows],
            "server": self.server.as_dict() if self.server else None,
        }


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Ctrl-C held back (blocked, not ignored) while a worker is spawned.

    The child inherits the blocked mask, so a Ctrl-C that reaches the terminal's process group while it
    starts up stays pending there until the worker ignores it; here it is delivered when the block is
    lifted, so the coordinator still sees it. Ignoring it instead (``SIG_IGN``) would lose it. The
    resource tracker is started first: starting it lifts any block on SIGINT."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class WorkerPool:
    """Worker processes, each holding its own connection(s) to the server."""

    def __init__(self, config: WorkerConfig, processes: int) -> None:
        context = multiprocessing.get_context("spawn")  # no inherited gRPC/event-loop state
        self._conns: list[Connection] = []
        self._processes = []
        for index in range(processes):
            parent, child = context.Pipe()
            process = context.Process(
                target=worker_main, args=(child, config, index), daemon=True, name=f"ferry-perf-{index}"
            )
            with _sigint_held():
                process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        for conn in self._conns:
            self._expect(conn, "ready", 60.0)

    @property
    def size(self) -> int:
        return len(self._conns)

    @staticmethod
    def _expect(conn: Connection, kind: str, timeout: float) -> tuple[Any, ...]:
        if not conn.poll(timeout):
            raise RuntimeError(f"a perf worker did not answer '{kind}' within {timeout:.0f} s")
        message = conn.recv()
        if message[0] == "error":
            raise RuntimeError(f"a perf worker failed: {message[1]}")
        return message

    def start(self, loads: Sequence[Load]) -> list[Connection]:
        active = []
        for conn, load in zip(self._conns, loads, strict=True):
            if load.concurrency > 0 or load.rate > 0:
                conn.send({"op": "run", "load": load})
                active.append(conn)
        return active

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send({"op": "exit"})
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.terminate()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def split_load(mode: str, value: float, workers: int, plan: StepPlan, seed: int) -> list[Load]:
    """Share a step's load among workers: concurrency slots dealt round-robin, rate divided evenly."""
    if mode == "concurrency":
        total = int(value)
        return [Load(concurrency=total // workers + (1 if i < total % workers else 0)) for i in range(workers)]
    return [
        Load(
            rate=value / workers,
            distribution=plan.distribution,
            seed=seed * 1000 + i,
            max_outstanding=max(1, plan.max_outstanding // workers),
        )
        for i in range(workers)
    ]


class _Collected:
    def __init__(self) -> None:
        self.ends: list[np.ndarray] = []
        self.latencies: list[np.ndarray] = []
        self.failure_ends: list[np.ndarray] = []

    def add(self, message: tuple[Any, ...]) -> None:
        _, ends, latencies, failure_ends = message
        self.ends.append(ends)
        self.latencies.append(latencies)
        self.failure_ends.append(failure_ends)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        def join(parts: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(parts) if parts else np.empty(0)

        return join(self.ends), join(self.latencies), join(self.failure_ends)


def run_step(
    pool: WorkerPool,
    mode: str,
    value: float,
    plan: StepPlan,
    seed: int,
    statistics: Callable[[], dict[str, int]] | None,
    progress: Callable[[str], None],
) -> StepResult:
    """Run one step of the sweep and return its measurement."""
    before = statistics() if statistics else None
    active = pool.start(split_load(mode, value, pool.size, plan, seed))
    collected = _Collected()
    windows: list[WindowStats] = []
    started = time.monotonic()
    first = started + plan.warmup_s
    stable = False
    label = f"{mode} {value:g}"

    def receive_until(deadline: float) -> None:
        while (left := deadline - time.monotonic()) > 0:
            for conn in _readable(active, left):
                message = conn.recv()
                if message[0] == "records":
                    collected.add(message)
                elif message[0] == "error":
                    raise RuntimeError(f"a perf worker failed: {message[1]}")

    while True:
        window_end = first + (len(windows) + 1) * plan.window_s
        receive_until(window_end + 2 * FLUSH_S)  # records of the window's last moments arrive
        ends, latencies, failure_ends = collected.arrays()
        index = len(windows)
        in_window = split_windows(ends, first, plan.window_s) == index
        failed = int(np.count_nonzero(split_windows(failure_ends, first, plan.window_s) == index))
        windows.append(window_stats(latencies[in_window], failed, plan.window_s))
        w = windows[-1]
        progress(
            f"  {label}: window {len(windows)}: {w.throughput:9.1f} infer/s  p50 {w.p50_us / 1e3:8.2f} ms  "
            f"p99 {w.p99_us / 1e3:8.2f} ms" + (f"  {failed} failed" if failed else "")
        )
        stable = is_stable(windows, plan.stability, STABLE_WINDOWS)
        elapsed = time.monotonic() - started
        if stable or len(windows) >= plan.max_windows or elapsed + plan.window_s > plan.time_limit_s:
            break

    for conn in active:
        conn.send({"op": "stop"})
    totals: list[dict[str, Any]] = []
    pending = set(active)
    deadline = time.monotonic() + 180.0
    while pending and time.monotonic() < deadline:
        for conn in _readable(list(pending), 1.0):
            message = conn.recv()
            if message[0] == "records":
                collected.add(message)
            elif message[0] == "done":
                totals.append(message[1])
                pending.discard(conn)
            elif message[0] == "error":
                raise RuntimeError(f"a perf worker failed: {message[1]}")
    if pending:
        raise RuntimeError(f"{len(pending)} perf worker(s) did not finish their requests within 180 s")
    elapsed = time.monotonic() - started

    ends, latencies, failure_ends = collected.arrays()
    last = windows[-STABLE_WINDOWS:]
    lo = first + (len(windows) - len(last)) * plan.window_s
    hi = first + len(windows) * plan.window_s
    chosen = (ends >= lo) & (ends < hi)
    merged = window_stats(latencies[chosen], int(np.count_nonzero((failure_ends >= lo) & (failure_ends < hi))), hi - lo)
    failures: dict[str, int] = {}
    for total in totals:
        for text, count in total["failures"].items():
            failures[text] = failures.get(text, 0) + count
    result = StepResult(
        mode=mode,
        value=value,
        client=merged,
        windows=windows,
        stable=stable,
        client_requests=sum(t["ok"] for t in totals),
        client_failures=sum(t["failed"] for t in totals),
        delayed=sum(t["delayed"] for t in totals),
        failures=failures,
        client_cpu=max((t["cpu_s"] for t in totals), default=0.0) / elapsed,
        client_cores=sum(t["cpu_s"] for t in totals) / elapsed,
    )
    if statistics is not None and before is not None:
        result.server = server_stats.breakdown(before, statistics())
    if not stable:
        progress(
            f"  {label}: results still varied by more than {plan.stability:.0%} from window to window when the "
            f"step ended ({len(windows)} window(s) of {plan.window_s:g} s); the figures below average the last "
            f"{len(last)}. A busy machine or server does this: use a longer --measurement-interval or more "
            "--max-trials for steadier numbers"
        )
    return result


def default_processes(max_load: float, mode: str) -> int:
    """Enough worker processes that no single interpreter is the bottleneck, at most one per core."""
    cores = multiprocessing.cpu_count()
    if mode == "concurrency":
        return max(1, min(cores, math.ceil(max_load / 4)))
    return max(1, min(cores, math.ceil(max_load / 500)))


def progress_printer(stream: TextIO = sys.stderr) -> Callable[[str], None]:
    def show(line: str) -> None:
        print(line, file=stream, flush=True)

    return show


def _readable(connections: Sequence[Connection], timeout: float) -> list[Connection]:
    """The connections with something to receive (``wait`` answers in its wider type: sockets, fds)."""
    ready = wait(connections, timeout=timeout)
    return [conn for conn in connections if conn in ready]
