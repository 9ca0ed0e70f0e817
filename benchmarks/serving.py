"""Serving benchmark: how close does Ferry get to raw ONNX Runtime, and what does a request cost?

Run ``python benchmarks/serving.py [--quick] [--duration S] [--output FILE] [--profile]``.

Steps, in order:

1. raw in-process ONNX Runtime throughput of ResNet-50 per batch size, with the SessionOptions the
   server uses, so "served / raw" compares like with like;
2. a Ferry server in a subprocess (127.0.0.1, free ports) and, while it is idle, sequential
   batch-1 requests over gRPC and REST interleaved with raw batch-1 runs, for the per-request
   overhead;
3. closed-loop batch-1 ResNet-50 load over REST (binary) and gRPC at several concurrencies, with
   the batch sizes the server formed taken from its statistics API;
4. a tiny model (no compute) over both protocols, so only serving overhead is measured.

Every load step is a warm-up followed by several measurement windows; the median window is
reported. The markdown table and a JSON file of every number go to ``benchmarks/results/``.
Clients run in spawned worker processes so that their Python work never shares the GIL with the
process that keeps time and reads statistics.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402  (benchmarks/ is not a package)
import profile_summary  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
TMP = RESULTS / "tmp"

RAW_BATCHES = (1, 2, 4, 8, 16, 32)
RESNET_CONCURRENCY = (1, 2, 4, 8, 16, 32)
TINY_CONCURRENCY = (1, 4, 16)
PROTOCOLS = ("rest", "grpc")
PROFILE_RATE = 200  # py-spy samples per second
PROTOCOL_NAMES = {"rest": "REST (binary)", "grpc": "gRPC"}


def now_ns() -> int:
    """CLOCK_MONOTONIC, which every process on the machine shares, so worker timestamps line up."""
    return time.monotonic_ns()


def sleep_until(deadline_ns: int) -> None:
    delay = (deadline_ns - now_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def percentile_ms(values_ns: Sequence[int] | np.ndarray, q: float) -> float:
    if len(values_ns) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(values_ns, dtype=np.float64), q)) / 1e6


# --- clients (used by worker processes and by the idle-latency step) ----------------------------


@dataclass
class Target:
    """What a client sends: one model, one input tensor (batch 1), one requested output."""

    protocol: str
    url: str
    model: str
    input_name: str
    output_name: str
    data: np.ndarray


def make_caller(target: Target) -> tuple[Callable[[], np.ndarray], Callable[[], None]]:
    """A function sending one inference request with a fixed, pre-encoded input, and a closer.

    The input objects are built once and reused, as perf_analyzer does, so the client's own cost
    per request is only what tritonclient does on every call.
    """
    from tritonclient.utils import np_to_triton_dtype

    data = target.data
    datatype = np_to_triton_dtype(data.dtype)  # FP32 tensors, or BYTES for encoded images
    if target.protocol == "grpc":
        import tritonclient.grpc as grpcclient

        grpc_client = grpcclient.InferenceServerClient(target.url)
        grpc_input = grpcclient.InferInput(target.input_name, list(data.shape), datatype)
        grpc_input.set_data_from_numpy(data)
        grpc_output = grpcclient.InferRequestedOutput(target.output_name)

        def call_grpc() -> np.ndarray:
            result = grpc_client.infer(target.model, [grpc_input], outputs=[grpc_output])
            return result.as_numpy(target.output_name)

        return call_grpc, grpc_client.close

    import tritonclient.http as httpclient

    http_client = httpclient.InferenceServerClient(target.url, connection_timeout=120.0, network_timeout=120.0)
    http_input = httpclient.InferInput(target.input_name, list(data.shape), datatype)
    http_input.set_data_from_numpy(data, binary_data=True)
    http_output = httpclient.InferRequestedOutput(target.output_name, binary_data=True)

    def call_http() -> np.ndarray:
        result = http_client.infer(target.model, [http_input], outputs=[http_output])
        return result.as_numpy(target.output_name)

    return call_http, http_client.close


# --- worker processes ------------------------------------------------------------------------


@dataclass
class _ThreadLog:
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""


def _client_thread(
    target: Target,
    ready: threading.Barrier,
    schedule: dict[str, int],
    log: _ThreadLog,
    pace_ns: int = 0,
    offset_ns: int = 0,
) -> None:
    """One client: connect, send one request to warm the connection, then loop: closed-loop, or with
    ``pace_ns`` one request every ``pace_ns`` from ``offset_ns`` after the start (latency is measured
    from the scheduled send time, so a client that falls behind does not hide the wait)."""
    call: Callable[[], np.ndarray] | None = None
    close: Callable[[], None] | None = None
    try:
        call, close = make_caller(target)
        call()
    except Exception as exc:  # reported to the parent, which aborts the step
        log.errors += 1
        log.first_error = f"{type(exc).__name__}: {exc}"
    ready.wait()  # the parent's start time arrives after every thread has passed this
    ready.wait()
    if call is None:
        return
    sleep_until(schedule["start"])
    end = schedule["end"]
    scheduled = schedule["start"] + offset_ns
    while True:
        if pace_ns:
            sleep_until(scheduled)
            started, scheduled = scheduled, scheduled + pace_ns
        else:
            started = now_ns()
        if started >= end:
            break
        try:
            call()
        except Exception as exc:
            log.errors += 1
            if not log.first_error:
                log.first_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.01)
            continue
        log.starts.append(started)
        log.ends.append(now_ns())
    if close is not None:
        with contextlib.suppress(Exception):
            close()


def _worker_main(conn: Connection) -> None:
    """Worker process loop: ("prepare", job) -> ("ready", error), ("go", start, end) -> ("done", log)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    while True:
        message = conn.recv()
        if message[0] == "stop":
            return
        job: dict[str, Any] = message[1]
        target = Target(
            job["protocol"], job["url"], job["model"], job["input_name"], job["output_name"], np.asarray(job["data"])
        )
        count = job["threads"]
        barrier = threading.Barrier(count + 1)
        schedule: dict[str, int] = {}
        logs = [_ThreadLog() for _ in range(count)]
        pace_ns = int(job.get("pace_ns", 0))
        offsets = np.random.default_rng(job.get("seed", 0)).integers(0, max(pace_ns, 1), count)
        threads = [
            threading.Thread(
                target=_client_thread, args=(target, barrier, schedule, log, pace_ns, int(offset)), daemon=True
            )
            for log, offset in zip(logs, offsets, strict=True)
        ]
        for thread in threads:
            thread.start()
        barrier.wait()
        error = next((log.first_error for log in logs if log.first_error), "")
        conn.send(("ready", error))
        _, schedule["start"], schedule["end"] = conn.recv()
        barrier.wait()
        for thread in threads:
            thread.join()
        conn.send(
            (
                "done",
                {
                    "starts": np.asarray([t for log in logs for t in log.starts], dtype=np.int64),
                    "ends": np.asarray([t for log in logs for t in log.ends], dtype=np.int64),
                    "errors": sum(log.errors for log in logs),
                    "first_error": next((log.first_error for log in logs if log.first_error), ""),
                },
            )
        )


class WorkerPool:
    """Spawned client processes kept for the whole run, so no step pays for process start-up."""

    def __init__(self, size: int) -> None:
        context = mp.get_context("spawn")  # never fork a process that holds ONNX Runtime threads
        self.conns: list[Connection] = []
        self.processes: list[Any] = []
        for _ in range(size):
            parent, child = context.Pipe()
            process = context.Process(target=_worker_main, args=(child,), daemon=True)
            process.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(process)

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(Exception):
                conn.send(("stop",))
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)


# --- the server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FerryProcess:
    """``ferry serve`` on 127.0.0.1 with free ports, its log in benchmarks/results/tmp/."""

    def __init__(
        self, repo: Path, launcher: Sequence[str] = (sys.executable, "-m", "ferry"), extra: Sequence[str] = ()
    ) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.start(
            [
                *launcher,
                "serve",
                "--model-repository",
                str(repo),
                "--host",
                "127.0.0.1",
                "--http-port",
                str(self.http_port),
                "--grpc-port",
                str(self.grpc_port),
                "--metrics-port",
                str(self.metrics_port),
                "--log-level",
                "warning",
                *extra,
            ]
        )

    def start(self, command: Sequence[str], log_name: str = "server.log") -> None:
        """Start ``command``, a server on this object's ports, its output in ``TMP / log_name``."""
        TMP.mkdir(parents=True, exist_ok=True)
        self.log_path = TMP / log_name
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.pid = self.process.pid

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def url(self, protocol: str) -> str:
        return self.grpc_url if protocol == "grpc" else self.http_url

    def _get(self, path: str, timeout: float = 10.0, data: bytes | None = None) -> tuple[int, bytes]:
        """GET ``path`` (POST when ``data`` is given): the status and body, error statuses included."""
        request = urllib.request.Request(f"http://{self.http_url}{path}", data=data)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_ready(self, models_: Sequence[str], timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ferry exited with {self.process.returncode}; see {self.log_path}")
            with contextlib.suppress(OSError):
                if self._get("/v2/health/ready", 2.0)[0] == 200 and all(
                    self._get(f"/v2/models/{name}/ready", 2.0)[0] == 200 for name in models_
                ):
                    return
                self._raise_on_failed_load(models_)
            time.sleep(0.25)
        raise RuntimeError(f"ferry not ready after {timeout:.0f} s; see {self.log_path}")

    def _raise_on_failed_load(self, models_: Sequence[str]) -> None:
        """Stop waiting at once when the repository index says a wanted model failed to load."""
        status, body = self._get("/v2/repository/index", 2.0, data=b"{}")
        if status != 200:
            return
        for entry in json.loads(body):
            if entry.get("name") in models_ and entry.get("state") == "UNAVAILABLE" and entry.get("reason"):
                raise RuntimeError(f"model {entry['name']!r} failed to load: {entry['reason']}; see {self.log_path}")

    def stats(self, model: str) -> dict[str, Any]:
        status, body = self._get(f"/v2/models/{model}/stats")
        if status != 200:
            raise RuntimeError(f"statistics of {model}: HTTP {status} {body[:200]!r}")
        return json.loads(body)["model_stats"][0]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()


# --- other load on the machine --------------------------------------------------------------


def _busy_jiffies() -> int:
    """Non-idle CPU time of the whole machine (all processes, niced ones included)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    return fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]


def child_pids(pid: int) -> list[int]:
    """The direct children of every thread of ``pid`` (intake processes, perf workers)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def publish(text: str, out: Path | None) -> None:
    """Print a benchmark's table, and write it to ``out`` when given."""
    if out is not None:
        out.write_text(text)
    print(text)


def descendant_pids(pid: int) -> list[int]:
    """Every process below ``pid`` (an intake process's own children too)."""
    below, stack = [], child_pids(pid)
    while stack:
        child = stack.pop()
        below.append(child)
        stack += child_pids(child)
    return below


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU time so far of the process ``pid`` itself and of everything below it (intake processes)."""
    tick = os.sysconf("SC_CLK_TCK")
    return _process_jiffies(pid) / tick, sum(_process_jiffies(p) for p in descendant_pids(pid)) / tick


def _process_jiffies(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime
    return 0


class CpuMeter:
    """How much of the CPUs processes other than the benchmark's used: on a shared machine that
    is the first thing to check when a row looks wrong."""

    def __init__(self, pids: Callable[[], Sequence[int]]) -> None:
        self.pids = pids
        self.ticks = os.sysconf("SC_CLK_TCK")

    def snapshot(self) -> tuple[int, int, int]:
        return now_ns(), _busy_jiffies(), sum(_process_jiffies(pid) for pid in self.pids())

    def other_share(self, before: tuple[int, int, int], after: tuple[int, int, int]) -> float:
        wall = (after[0] - before[0]) / 1e9
        other = (after[1] - before[1]) - (after[2] - before[2])
        return max(0.0, other / self.ticks / (wall * (os.cpu_count() or 1))) if wall > 0 else 0.0


# --- raw ONNX Runtime ------------------------------------------------------------------------


def make_session(model_file: Path) -> Any:
    """The session the server would build for one KIND_CPU instance (backends/onnxruntime.py)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = os.cpu_count() or 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(model_file), sess_options=options, providers=["CPUExecutionProvider"])


def raw_window(session: Any, batch: int, window_s: float) -> dict[str, Any]:
    """One window of back-to-back runs at ``batch``: at least ``window_s`` seconds and 3 runs.

    One discarded run first, because the first run after a shape change re-plans memory.
    """
    feeds = {"input": np.repeat(models.sample_image(), batch, axis=0)}
    session.run(["logits"], feeds)
    latencies = []
    t0 = now_ns()
    while True:
        start = now_ns()
        session.run(["logits"], feeds)
        latencies.append(now_ns() - start)
        if now_ns() - t0 >= window_s * 1e9 and len(latencies) >= 3:
            break
    elapsed = (now_ns() - t0) / 1e9
    return {"throughput": batch * len(latencies) / elapsed, "runs": len(latencies), "latency_ns": latencies}


def bench_raw(session: Any, batches: Sequence[int], window_s: float, windows: int) -> list[dict[str, Any]]:
    """Images/s per batch size. Windows go round-robin over the batch sizes, so a slow spell of
    this shared machine spreads over all sizes instead of spoiling one."""
    for batch in batches:
        for _ in range(2):
            session.run(["logits"], {"input": np.repeat(models.sample_image(), batch, axis=0)})
    per_batch: dict[int, list[dict[str, Any]]] = {batch: [] for batch in batches}
    for _ in range(windows):
        for batch in batches:
            per_batch[batch].append(raw_window(session, batch, window_s))
    rows = []
    for batch, window_rows in per_batch.items():
        median = _median_window(window_rows, "throughput")
        all_latencies = [v for w in window_rows for v in w["latency_ns"]]
        row = {
            "batch": batch,
            "throughput": median["throughput"],
            "windows": [w["throughput"] for w in window_rows],
            "runs": sum(w["runs"] for w in window_rows),
            "latency_p50_ms": percentile_ms(all_latencies, 50),
            "latency_p99_ms": percentile_ms(all_latencies, 99),
        }
        rows.append(row)
        print(
            f"  raw batch {batch:2d}: {row['throughput']:7.1f} img/s  p50 {row['latency_p50_ms']:8.1f} ms "
            f"(windows {', '.join(f'{v:.1f}' for v in row['windows'])})",
            flush=True,
        )
    return rows


def raw_latency_ms(raw: list[dict[str, Any]], batch: float) -> float:
    """Raw latency at any batch size, linear between measured sizes (latency is close to linear)."""
    sizes = [r["batch"] for r in raw]
    values = [r["latency_p50_ms"] for r in raw]
    if batch > sizes[-1] and len(sizes) > 1:  # extrapolate along the last segment
        slope = (values[-1] - values[-2]) / (sizes[-1] - sizes[-2])
        return values[-1] + slope * (batch - sizes[-1])
    return float(np.interp(batch, sizes, values))


def _median_window(windows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    ordered = sorted(windows, key=lambda w: w[key])
    return ordered[(len(ordered) - 1) // 2]


# --- idle latency ----------------------------------------------------------------------------


def bench_idle(session: Any, server: FerryProcess, blocks: int, block_size: int = 10) -> dict[str, Any]:
    """Sequential batch-1 ResNet-50 on one input: blocks of raw, gRPC and REST calls in turn.

    Blocks, not single calls, alternate: ONNX Runtime's threads spin for tens of milliseconds after
    a run, so switching between the in-process session and the server's on every call makes both
    up to 3x slower on 2 cores. Within a block only one session is active; the first call of each
    block is dropped and a pause before it lets the other session's threads go to sleep. The block
    order rotates, so drift of the machine reaches all three paths alike.
    """
    data = models.sample_image()
    callers: dict[str, Callable[[], np.ndarray]] = {"raw": lambda: session.run(["logits"], {"input": data})[0]}
    closers = []
    for protocol in PROTOCOLS:
        call, close = make_caller(Target(protocol, server.url(protocol), "resnet50", "input", "logits", data))
        callers[protocol] = call
        closers.append(close)
    names = list(callers)
    samples: dict[str, list[int]] = {name: [] for name in names}
    block_medians: dict[str, list[float]] = {name: [] for name in names}
    try:
        expected = callers["raw"]()
        for name, call in callers.items():
            for _ in range(3):
                got = call()
            if not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
                raise RuntimeError(
                    f"{name} output differs from raw ONNX Runtime by {float(np.abs(got - expected).max()):.3g}"
                )
        for index in range(blocks):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                time.sleep(0.2)
                callers[name]()
                block = []
                for _ in range(block_size):
                    start = now_ns()
                    callers[name]()
                    block.append(now_ns() - start)
                samples[name].extend(block)
                block_medians[name].append(float(np.median(block)))
    finally:
        for close in closers:
            with contextlib.suppress(Exception):
                close()
    raw = np.asarray(samples["raw"])
    result: dict[str, Any] = {
        "blocks": blocks,
        "block_size": block_size,
        "calls": len(raw),
        "raw_p50_ms": percentile_ms(raw, 50),
        "raw_p99_ms": percentile_ms(raw, 99),
    }
    for protocol in PROTOCOLS:
        served = np.asarray(samples[protocol])
        paired = np.asarray(block_medians[protocol]) - np.asarray(block_medians["raw"])
        result[protocol] = {
            "p50_ms": percentile_ms(served, 50),
            "p99_ms": percentile_ms(served, 99),
            "overhead_ms": percentile_ms(served, 50) - percentile_ms(raw, 50),
            "paired_overhead_ms": float(np.median(paired)) / 1e6,
        }
    result["samples_ns"] = samples
    return result


# --- load steps ------------------------------------------------------------------------------


@dataclass
class LoadStep:
    label: str
    protocol: str
    model: str
    input_name: str
    output_name: str
    data: np.ndarray
    concurrency: int
    processes: int
    warmup_s: float
    window_s: float
    windows: int
    rate: float = 0.0  # requests/s over all clients, evenly paced; 0: closed loop

    @property
    def clients(self) -> str:
        per = self.concurrency // self.processes
        if self.processes == 1:
            return f"1 process x {self.concurrency} thread{'s' if self.concurrency > 1 else ''}"
        return f"{self.processes} processes x {per} thread{'s' if per > 1 else ''}"


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Executions and items between two statistics snapshots, with the batch-size histogram."""

    def by_size(snapshot: dict[str, Any]) -> dict[int, tuple[int, int]]:
        return {
            int(b["batch_size"]): (int(b["compute_infer"]["count"]), int(b["compute_infer"]["ns"]))
            for b in snapshot.get("batch_stats", [])
        }

    old, new = by_size(before), by_size(after)
    histogram = {}
    infer_ns = 0
    for size, (count, ns) in new.items():
        old_count, old_ns = old.get(size, (0, 0))
        if count > old_count:
            histogram[size] = count - old_count
            infer_ns += ns - old_ns
    return {
        "inference_count": int(after["inference_count"]) - int(before["inference_count"]),
        "execution_count": int(after["execution_count"]) - int(before["execution_count"]),
        "histogram": histogram,
        "compute_infer_ns": infer_ns,
    }


def run_load(
    pool: WorkerPool,
    server: FerryProcess,
    step: LoadStep,
    raw: list[dict[str, Any]] | None,
    meter: CpuMeter,
    profile_path: Path | None = None,
) -> dict[str, Any]:
    """One closed-loop step: warm-up, then ``windows`` windows; statistics read at each boundary."""
    job = {
        "protocol": step.protocol,
        "url": server.url(step.protocol),
        "model": step.model,
        "input_name": step.input_name,
        "output_name": step.output_name,
        "data": step.data,
        "pace_ns": int(step.concurrency / step.rate * 1e9) if step.rate else 0,
    }
    conns = pool.conns[: step.processes]
    for index, (conn, threads) in enumerate(zip(conns, _split(step.concurrency, step.processes), strict=True)):
        conn.send(("prepare", {**job, "threads": threads, "seed": index}))
    for conn in conns:
        _, error = conn.recv()
        if error:
            raise RuntimeError(f"{step.label}: client could not start: {error}")
    start = now_ns() + 200_000_000
    boundaries = [start + int((step.warmup_s + k * step.window_s) * 1e9) for k in range(step.windows + 1)]
    for conn in conns:
        conn.send(("go", start, boundaries[-1]))
    profiler = None
    if profile_path is not None:  # sample the server over the measurement windows only
        sleep_until(boundaries[0])
        profiler = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("py-spy")),
                "record",
                "-p",
                str(server.pid),
                "-o",
                str(profile_path),
                "--format",
                "raw",
                "--threads",
                "--rate",
                str(PROFILE_RATE),
                "--duration",
                str(max(1, int(step.windows * step.window_s))),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
    snapshots = []
    for boundary in boundaries:
        sleep_until(boundary)
        snapshots.append((now_ns(), server.stats(step.model)))
        if boundary == boundaries[0]:
            cpu_before = meter.snapshot()
    other_cpu = meter.other_share(cpu_before, meter.snapshot())
    logs = [conn.recv()[1] for conn in conns]
    if profiler is not None:
        profiler.wait(timeout=60)
        if profile_path is not None and profile_path.exists():
            seconds = max(1, int(step.windows * step.window_s))
            summary = profile_summary.summarise(profile_summary.load(profile_path), 20, PROFILE_RATE * seconds)
            profile_path.with_suffix(".summary.txt").write_text(summary + "\n")
            print(f"  profile of the server ({profile_path}):\n" + summary, flush=True)
    starts = np.concatenate([log["starts"] for log in logs])
    ends = np.concatenate([log["ends"] for log in logs])
    errors = sum(log["errors"] for log in logs)
    if errors:
        first = next(log["first_error"] for log in logs if log["first_error"])
        print(f"  WARNING {step.label}: {errors} failed requests, first: {first}", flush=True)

    windows = []
    for k in range(step.windows):
        lo, hi = boundaries[k], boundaries[k + 1]
        seconds = (hi - lo) / 1e9
        done = (ends >= lo) & (ends < hi)
        overlap = np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None)
        # Each request counts 1 spread over its lifetime: a completion rate without the
        # quantisation that whole batches finishing at once put into a plain count.
        smoothed = float(np.sum(overlap / np.maximum(ends - starts, 1))) / seconds
        latencies = ends[done] - starts[done]
        delta = _stats_delta(snapshots[k][1], snapshots[k + 1][1])
        wall_ns = snapshots[k + 1][0] - snapshots[k][0]
        window = {
            "throughput": smoothed,
            "completed": int(done.sum()),
            "count_throughput": int(done.sum()) / seconds,
            "p50_ms": percentile_ms(latencies, 50),
            "p99_ms": percentile_ms(latencies, 99),
            **delta,
            "avg_batch": delta["inference_count"] / delta["execution_count"] if delta["execution_count"] else 0.0,
            "busy": delta["compute_infer_ns"] / wall_ns if wall_ns else 0.0,
        }
        if raw is not None and delta["histogram"]:
            items = sum(size * n for size, n in delta["histogram"].items())
            raw_seconds = sum(n * raw_latency_ms(raw, size) / 1e3 for size, n in delta["histogram"].items())
            window["raw_same_batches"] = items / raw_seconds
            window["infer_ms_per_execution"] = delta["compute_infer_ns"] / 1e6 / delta["execution_count"]
            window["raw_ms_per_execution"] = raw_seconds * 1e3 / delta["execution_count"]
        windows.append(window)
    median = _median_window(windows, "throughput")
    result = {
        "label": step.label,
        "protocol": step.protocol,
        "model": step.model,
        "concurrency": step.concurrency,
        "processes": step.processes,
        "clients": step.clients,
        "errors": errors,
        "window_s": step.window_s,
        "warmup_s": step.warmup_s,
        "windows": windows,
        "throughput": median["throughput"],
        "count_throughput": median["count_throughput"],
        "p50_ms": median["p50_ms"],
        "p99_ms": median["p99_ms"],
        "avg_batch": median["avg_batch"],
        "busy": median["busy"],
        "other_cpu": other_cpu,
    }
    if raw is not None:
        best = max(r["throughput"] for r in raw)
        result["vs_raw_best"] = median["throughput"] / best
        same = median.get("raw_same_batches")
        result["vs_raw_same_batches"] = median["throughput"] / same if same else float("nan")
        result["infer_ms_per_execution"] = median.get("infer_ms_per_execution", float("nan"))
        result["raw_ms_per_execution"] = median.get("raw_ms_per_execution", float("nan"))
    unit = "img/s" if step.model == "resnet50" else "req/s"
    extra = (
        f"  vs raw best {result['vs_raw_best']:.3f}  same batches {result['vs_raw_same_batches']:.3f}"
        if raw is not None
        else ""
    )
    print(
        f"  {step.label:32s} {result['throughput']:8.1f} {unit}  p50 {result['p50_ms']:8.2f} ms  "
        f"p99 {result['p99_ms']:8.2f} ms  batch {result['avg_batch']:5.2f}  busy {result['busy']:.2f}{extra}  "
        f"other CPU {other_cpu:.0%}  "
        f"(windows {', '.join(format(w['throughput'], '.1f') for w in windows)})",
        flush=True,
    )
    return result


# --- report ----------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    import grpc
    import onnxruntime
    import tritonclient

    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    commit = ""
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "tritonclient": getattr(tritonclient, "__version__", "") or _dist_version("tritonclient"),
        "grpcio": grpc.__version__,
        "ferry": _dist_version("ferry"),
        "commit": commit,
    }


def _dist_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or value != value:  # NaN
        return "-"
    return f"{value:.{digits}f}"


def render_markdown(report: dict[str, Any]) -> str:
    info = report["machine"]
    settings = report["settings"]
    raw = report["raw"]
    best = max(raw, key=lambda r: r["throughput"])
    idle = report["idle"]
    lines = [
        "# Ferry serving benchmark (CPU)",
        "",
        f"- command: `{report['command']}` ({report['elapsed_s']:.0f} s)",
        f"- date (UTC): {report['date']}; commit {info['commit'] or '?'}",
        f"- machine: {info['cpu_count']} CPUs ({info['cpu_model']}), {info['platform']}, Python {info['python']}",
        f"- onnxruntime {info['onnxruntime']}, numpy {info['numpy']}, tritonclient {info['tritonclient']}, "
        f"grpcio {info['grpcio']}, ferry {info['ferry']}",
        "- model: ResNet-50 with random weights (benchmarks/models.py), FP32 1x3x224x224 per request; server "
        "config max_batch_size 32, `dynamic_batching { }` (no queue delay), 1 CPU instance with "
        f"{info['cpu_count']} intra-op threads; raw runs use the same SessionOptions in the benchmark process",
        f"- clients: {report['clients_note']}",
        f"- steps: {settings['warmup_s']:g} s warm-up, then {settings['windows']} windows of "
        f"{settings['window_s']:g} s (tiny: {settings['tiny_window_s']:g} s; raw: {settings['raw_window_s']:g} s "
        "and >= 3 runs, round-robin over batch sizes); the median window is reported",
        "- throughput: completions per second in the window, each request counted by the share of its "
        "lifetime inside the window (a plain count, noisier because a whole batch finishes at once, is "
        "count_throughput in the JSON)",
        "- avg batch: inference_count / execution_count deltas of GET /v2/models/<m>/stats over the window; "
        "busy: share of the window the instance spent inside ORT (compute_infer; a batch that straddles "
        "a window edge counts in the later window, so it can pass 1)",
        f"- vs raw best: served / raw best ({best['throughput']:.1f} img/s at batch {best['batch']}); "
        "vs raw same batches: served / raw throughput of exactly the batch sizes the server ran in the window "
        "(raw latencies interpolated between measured sizes); vs raw adjacent: served / raw batch "
        f"{report['raw_references']['batch']} measured just before and just after the step "
        "(corrects for the machine's drift)",
        f"- idle overhead: served p50 minus raw p50 of sequential batch-1 calls, {idle['blocks']} blocks of "
        f"{idle['block_size']} calls per path taken in turn (paired: median over rounds of the block-median "
        "differences); it includes tritonclient's encoding and decoding",
        "- other CPU: share of the machine's CPU time used by processes outside the benchmark (client "
        "workers, server and this process excluded) during the measurement; rows with more than a few "
        f"percent were disturbed (whole run: {report['other_cpu']:.0%})",
        "",
        "| part | path | batch / concurrency | clients | throughput | p50 ms | p99 ms | avg batch | busy | "
        "vs raw best | vs raw same batches | vs raw adjacent / idle overhead | other CPU |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in raw:
        lines.append(
            f"| raw ORT ResNet-50 | in-process | {r['batch']} | - | {_fmt(r['throughput'])} img/s | "
            f"{_fmt(r['latency_p50_ms'])} | {_fmt(r['latency_p99_ms'])} | {r['batch']} | - | "
            f"{_fmt(r['throughput'] / best['throughput'], 3)} | - | - | {report['raw_other_cpu']:.0%} |"
        )
    for s in report["served"]:
        lines.append(
            f"| served ResNet-50 | {PROTOCOL_NAMES[s['protocol']]} | {s['concurrency']} | {s['clients']} | "
            f"{_fmt(s['throughput'])} img/s | {_fmt(s['p50_ms'])} | {_fmt(s['p99_ms'])} | "
            f"{_fmt(s['avg_batch'], 2)} | {_fmt(s['busy'], 2)} | {_fmt(s['vs_raw_best'], 3)} | "
            f"{_fmt(s['vs_raw_same_batches'], 3)} | {_fmt(s['vs_raw_adjacent'], 3)} | {s['other_cpu']:.0%} |"
        )
    lines.append(
        f"| idle batch-1 ResNet-50 | in-process raw | 1 | sequential | - | {_fmt(idle['raw_p50_ms'], 2)} | "
        f"{_fmt(idle['raw_p99_ms'], 2)} | 1 | - | - | - | - | {idle['other_cpu']:.0%} |"
    )
    for protocol in PROTOCOLS:
        row = idle[protocol]
        lines.append(
            f"| idle batch-1 ResNet-50 | {PROTOCOL_NAMES[protocol]} | 1 | sequential | - | "
            f"{_fmt(row['p50_ms'], 2)} | {_fmt(row['p99_ms'], 2)} | 1 | - | - | - | "
            f"{row['overhead_ms']:+.2f} ms (paired {row['paired_overhead_ms']:+.2f} ms) | "
            f"{idle['other_cpu']:.0%} |"
        )
    for s in report["tiny"]:
        lines.append(
            f"| tiny (x+1, FP32 1x16) | {PROTOCOL_NAMES[s['protocol']]} | {s['concurrency']} | "
            f"{s['clients']} | {_fmt(s['throughput'], 0)} req/s | {_fmt(s['p50_ms'], 2)} | "
            f"{_fmt(s['p99_ms'], 2)} | {_fmt(s['avg_batch'], 2)} | {_fmt(s['busy'], 2)} | - | - | - | "
            f"{s['other_cpu']:.0%} |"
        )
    lines.append("")
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


# --- main ------------------------------------------------------------------------------------


@contextlib.contextmanager
def running_server(repo: Path) -> Iterator[FerryProcess]:
    server = FerryProcess(repo)
    try:
        server.wait_ready(["resnet50", "tiny"])
        yield server
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ferry serving benchmark (see the module docstring).")
    parser.add_argument("--quick", action="store_true", help="short smoke-test version (about a minute)")
    parser.add_argument("--duration", type=float, help="seconds per ResNet-50 measurement window (8; quick 1.5)")
    parser.add_argument("--windows", type=int, default=3, help="measurement windows per step (3)")
    parser.add_argument(
        "--output",
        type=Path,
        help="markdown file (benchmarks/results/serving-cpu.md; quick: results/tmp/); the JSON goes next to it",
    )
    parser.add_argument("--repo", type=Path, default=models.DEFAULT_REPO, help="model repository to build/use")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the server during the gRPC ResNet-50 c=16 step and the largest tiny steps "
        "(collapsed stacks in benchmarks/results/tmp/)",
    )
    args = parser.parse_args(argv)

    window = args.duration or (1.5 if args.quick else 8.0)
    raw_window_s = max(1.0, window / 2)
    tiny_window = max(1.0, window / 2)
    warmup = max(1.0, window / 2)
    raw_batches = (1, 8) if args.quick else RAW_BATCHES
    resnet_concurrency = (1, 8) if args.quick else RESNET_CONCURRENCY
    tiny_concurrency = (1, 4) if args.quick else TINY_CONCURRENCY
    idle_blocks = 2 if args.quick else 10
    output = args.output or (TMP / "serving-cpu-quick.md" if args.quick else RESULTS / "serving-cpu.md")
    argv_text = shlex.join(["python", "benchmarks/serving.py", *(sys.argv[1:] if argv is None else argv)])
    started = time.monotonic()

    print(f"building / checking models in {args.repo}", flush=True)
    models.build_repository(args.repo)
    model_file = args.repo / "resnet50" / "1" / "model.onnx"
    report: dict[str, Any] = {
        "command": argv_text,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "machine": machine_info(),
        "settings": {
            "window_s": window,
            "raw_window_s": raw_window_s,
            "tiny_window_s": tiny_window,
            "warmup_s": warmup,
            "windows": args.windows,
            "idle_blocks": idle_blocks,
        },
    }
    our_pids = [os.getpid()]
    meter = CpuMeter(lambda: our_pids)
    run_cpu = meter.snapshot()
    print("raw ONNX Runtime, in-process", flush=True)
    session = make_session(model_file)
    cpu = meter.snapshot()
    report["raw"] = bench_raw(session, raw_batches, raw_window_s, args.windows)
    report["raw_other_cpu"] = meter.other_share(cpu, meter.snapshot())

    pool = WorkerPool(max(tiny_concurrency))
    our_pids += [process.pid for process in pool.processes]
    try:
        with running_server(args.repo) as server:
            our_pids.append(server.pid)
            print(f"ferry pid {server.pid}: REST {server.http_url}, gRPC {server.grpc_url}", flush=True)
            print("idle batch-1 latency (blocks of raw, gRPC, REST calls in turn)", flush=True)
            cpu = meter.snapshot()
            idle = bench_idle(session, server, idle_blocks)
            idle["other_cpu"] = meter.other_share(cpu, meter.snapshot())
            report["idle"] = idle
            print(
                f"  raw p50 {idle['raw_p50_ms']:.2f} ms; "
                + "; ".join(
                    f"{p} p50 {idle[p]['p50_ms']:.2f} ms (overhead {idle[p]['overhead_ms']:+.2f}, "
                    f"paired {idle[p]['paired_overhead_ms']:+.2f})"
                    for p in PROTOCOLS
                ),
                flush=True,
            )

            image = models.sample_image()
            best_batch = max(report["raw"], key=lambda r: r["throughput"])["batch"]
            print(
                f"served ResNet-50, closed loop, batch-1 requests; raw batch {best_batch} windows between steps",
                flush=True,
            )
            report["served"] = []
            profile_resnet = max(c for c in resnet_concurrency if c <= 16)
            references = [raw_window(session, best_batch, raw_window_s)["throughput"]]
            for concurrency in resnet_concurrency:
                for protocol in PROTOCOLS:  # alternate protocols so drift of the machine hits both alike
                    step = LoadStep(
                        f"resnet50 {protocol} c={concurrency}",
                        protocol,
                        "resnet50",
                        "input",
                        "logits",
                        image,
                        concurrency,
                        1,
                        warmup,
                        window,
                        args.windows,
                    )
                    profile = (
                        TMP / f"profile-resnet50-{protocol}-c{concurrency}.txt"
                        if args.profile and protocol == "grpc" and concurrency == profile_resnet
                        else None
                    )
                    result = run_load(pool, server, step, report["raw"], meter, profile)
                    time.sleep(0.2)  # let the server's ORT threads stop spinning
                    references.append(raw_window(session, best_batch, raw_window_s)["throughput"])
                    result["raw_adjacent"] = (references[-2] + references[-1]) / 2
                    result["vs_raw_adjacent"] = result["throughput"] / result["raw_adjacent"]
                    print(
                        f"    raw batch {best_batch} before/after: {references[-2]:.1f} / {references[-1]:.1f} "
                        f"img/s -> served / raw adjacent {result['vs_raw_adjacent']:.3f}",
                        flush=True,
                    )
                    report["served"].append(result)
            report["raw_references"] = {"batch": best_batch, "throughput": references}

            print("tiny model, closed loop, one client process per connection", flush=True)
            report["tiny"] = []
            vector = np.arange(models.TINY_WIDTH, dtype=np.float32).reshape(1, -1)
            for protocol in PROTOCOLS:
                for concurrency in tiny_concurrency:
                    step = LoadStep(
                        f"tiny {protocol} c={concurrency}",
                        protocol,
                        "tiny",
                        "input",
                        "output",
                        vector,
                        concurrency,
                        concurrency,
                        max(1.0, warmup / 2),
                        tiny_window,
                        args.windows,
                    )
                    profile = (
                        TMP / f"profile-tiny-{protocol}-c{concurrency}.txt"
                        if args.profile and concurrency == max(tiny_concurrency)
                        else None
                    )
                    report["tiny"].append(run_load(pool, server, step, None, meter, profile))
            report["other_cpu"] = meter.other_share(run_cpu, meter.snapshot())
    finally:
        pool.close()

    report["clients_note"] = (
        "spawned worker processes running tritonclient closed-loop clients, each with its own connection "
        "and a fixed random input, in the same 2-CPU machine as the server; ResNet-50: 1 process with one "
        "thread per concurrency slot (the model dominates, the client needs ~1% CPU); tiny: one process "
        "per concurrency slot; idle latency: sequential calls from the benchmark's main process"
    )
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    markdown = render_markdown(report)
    write_report(output, markdown, report)
    return 0


def write_report(output: Path, markdown: str, report: dict[str, Any]) -> None:
    """The markdown table to ``output`` and every number as JSON next to it; the table is printed too."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(markdown)
    json_path = output.with_suffix(".json")
    json_path.write_text(json.dumps(_jsonable(report), indent=1) + "\n")
    print()
    print(markdown)
    print(f"wrote {output} and {json_path} in {report['elapsed_s']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
