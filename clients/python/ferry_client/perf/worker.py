"""A load-generating worker process: closed-loop concurrency or open-loop (Poisson) arrivals.

Workers run in their own processes so one Python interpreter never caps what the tool can
offer. Each keeps an asyncio loop full of requests and streams (completion time, latency)
records back over its pipe every ``FLUSH_S``; the coordinator cuts them into windows. Times
come from ``time.monotonic()``, one clock for all processes on the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from .wire import Security, Sender, WireRequest, make_sender

FLUSH_S = 0.1
DRAIN_TIMEOUT_S = 120.0
LATE_S = 0.001  # an open-loop send later than this behind its schedule counts as delayed


@dataclass(frozen=True)
class WorkerConfig:
    protocol: str
    url: str
    model: str
    version: str
    requests: list[WireRequest]
    security: Security
    connections: int
    grpc_engine: str = "grpcio"  # "raw" (pre-built HTTP/2 frames) or "grpcio"; see wire.GRPC_ENGINES


@dataclass(frozen=True)
class Load:
    """What one step asks of one worker: ``concurrency`` slots, or ``rate`` requests/s."""

    concurrency: int = 0
    rate: float = 0.0
    distribution: str = "poisson"
    seed: int = 0
    max_outstanding: int = 1024


class _Recorder:
    """Collects outcomes and ships them to the coordinator in small batches."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.ends: list[float] = []
        self.latencies: list[float] = []
        self.failure_ends: list[float] = []
        self.failures: Counter[str] = Counter()
        self.sent = self.ok = self.failed = self.delayed = 0

    def record(self, started: float, error: str | None) -> None:
        end = time.monotonic()
        if error is None:
            self.ok += 1
            self.ends.append(end)
            self.latencies.append((end - started) * 1e6)
        else:
            self.failed += 1
            self.failure_ends.append(end)
            self.failures[error[:300]] += 1

    def flush(self) -> None:
        if not (self.ends or self.failure_ends):
            return
        self.conn.send(("records", np.array(self.ends), np.array(self.latencies), np.array(self.failure_ends)))
        self.ends, self.latencies, self.failure_ends = [], [], []

    def totals(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "ok": self.ok,
            "failed": self.failed,
            "delayed": self.delayed,
            "failures": dict(self.failures.most_common(10)),
        }


async def _closed_loop(
    sender: Sender, requests: list[WireRequest], load: Load, recorder: _Recorder, running: asyncio.Event, offset: int
) -> None:
    async def slot(index: int) -> None:
        position = offset + index
        while running.is_set():
            request = requests[position % len(requests)]
            position += load.concurrency
            recorder.sent += 1
            started = time.monotonic()
            recorder.record(started, await sender.send(request))

    await asyncio.gather(*(slot(i) for i in range(load.concurrency)))


async def _open_loop(
    sender: Sender, requests: list[WireRequest], load: Load, recorder: _Recorder, running: asyncio.Event, offset: int
) -> None:
    """Send at scheduled times whatever the answers do; latency counts from the schedule."""
    rng = np.random.default_rng(load.seed)
    limit = asyncio.Semaphore(load.max_outstanding)
    tasks: set[asyncio.Task[None]] = set()

    async def one(request: WireRequest, scheduled: float) -> None:
        try:
            recorder.record(scheduled, await sender.send(request))
        finally:
            limit.release()

    position = offset
    scheduled = time.monotonic()
    while running.is_set():
        gap = rng.exponential(1.0 / load.rate) if load.distribution == "poisson" else 1.0 / load.rate
        scheduled += gap
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await limit.acquire()
        if time.monotonic() - scheduled > LATE_S:
            recorder.delayed += 1
        if not running.is_set():
            limit.release()
            break
        recorder.sent += 1
        task = asyncio.create_task(one(requests[position % len(requests)], scheduled))
        position += 1
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks)


async def _run(conn: Connection, config: WorkerConfig, worker_index: int) -> None:
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def receive() -> None:
        try:
            commands.put_nowait(conn.recv())
        except (EOFError, OSError):  # the coordinator is gone (interrupted): nobody reads the results
            loop.remove_reader(conn.fileno())
            commands.put_nowait({"op": "exit"})

    loop.add_reader(conn.fileno(), receive)
    sender = make_sender(
        config.protocol,
        config.url,
        config.model,
        config.version,
        config.connections,
        config.security,
        config.grpc_engine,
    )
    conn.send(("ready",))
    try:
        while True:
            command = await commands.get()
            if command["op"] == "exit":
                return
            load: Load = command["load"]
            recorder = _Recorder(conn)
            cpu_started = time.process_time()
            running = asyncio.Event()
            running.set()
            body = _open_loop if load.rate > 0 else _closed_loop
            generator = asyncio.create_task(body(sender, config.requests, load, recorder, running, worker_index))
            while not generator.done():
                with contextlib.suppress(asyncio.TimeoutError):
                    command = await asyncio.wait_for(commands.get(), FLUSH_S)
                    if command["op"] == "stop":
                        running.clear()  # slots finish the request in flight, then end
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(asyncio.shield(generator), DRAIN_TIMEOUT_S)
                    elif command["op"] == "exit":  # the run was abandoned: leave at once
                        generator.cancel()
                        await asyncio.gather(generator, return_exceptions=True)
                        return
                recorder.flush()
            generator.result()
            recorder.flush()
            conn.send(("done", {**recorder.totals(), "cpu_s": time.process_time() - cpu_started}))
    finally:
        loop.remove_reader(conn.fileno())
        await sender.close()


def worker_main(conn: Connection, config: WorkerConfig, worker_index: int) -> None:
    """Process entry point: serve load commands until told to exit.

    Ctrl-C reaches every process of the terminal's group: the coordinator handles it and ends the
    workers, so a worker ignores it (instead of printing a traceback of its own)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(_run(conn, config, worker_index))
    except Exception as exc:  # noqa: BLE001 - tell the coordinator instead of dying silently
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
