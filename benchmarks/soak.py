"""Soak: mixed load (REST + gRPC, tensors + images, several models) for N minutes.

Open-loop streams at fixed Poisson rates, each from its own worker process (ferry-client perf's
workers). Every interval it prints and records, per stream, the answers, errors, p50/p99, and
the server's RSS; at the end it writes the table to benchmarks/results/soak-cpu.md. A healthy
server ends with zero errors, flat latency and flat memory.

    python benchmarks/soak.py --minutes 10
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

import numpy as np
import psutil
from PIL import Image
from serving import ROOT, FerryProcess

from ferry_client import HttpClient
from ferry_client.perf.inputs import image_samples, model_inputs, random_samples
from ferry_client.perf.runner import WorkerPool
from ferry_client.perf.wire import Security, encode_requests
from ferry_client.perf.worker import Load, WorkerConfig

RESULTS = ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class Stream:
    name: str
    protocol: str
    model: str
    images: bool
    rate: float


STREAMS = (
    Stream("simple/http", "http", "simple", False, 80),
    Stream("simple/grpc", "grpc", "simple", False, 80),
    Stream("digits-png/http", "http", "digits", True, 20),
    Stream("digits-png/grpc", "grpc", "digits", True, 20),
    Stream("detector-png/grpc", "grpc", "digit_detector", True, 4),
)


def _pngs(folder: Path) -> None:
    """A few real images to send: digits (8x8, from scikit-learn) and detector scenes."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    (folder / "digits").mkdir(parents=True, exist_ok=True)
    for index in range(20):
        pixels = np.round(digits.images[index] * 255 / 16).astype(np.uint8)
        Image.fromarray(pixels, mode="L").save(folder / "digits" / f"{index}.png")
    import importlib.util

    spec = importlib.util.spec_from_file_location("detector", ROOT / "model_repo" / "digit_detector" / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (folder / "scenes").mkdir(exist_ok=True)
    for index, scene in enumerate(module.held_out_scenes(count=6)):
        buffer = io.BytesIO()
        Image.fromarray(scene.image).save(buffer, format="PNG")
        (folder / "scenes" / f"{index}.png").write_bytes(buffer.getvalue())


def _pool(server: FerryProcess, stream: Stream, images: Path) -> WorkerPool:
    with HttpClient(server.http_url) as client:
        specs, batched = model_inputs(client.model_metadata(stream.model), client.model_config(stream.model))
    if stream.images:
        folder = images / ("scenes" if stream.model == "digit_detector" else "digits")
        samples = image_samples(folder, specs, batched, 1)
        datatypes = {specs[0].name: "BYTES"}
    else:
        samples = random_samples(specs, batched, 1, {}, count=8)
        datatypes = {s.name: s.datatype for s in specs}
    requests = encode_requests(stream.protocol, stream.model, "", samples, datatypes)
    config = WorkerConfig(
        stream.protocol, server.url(stream.protocol), stream.model, "", requests, Security(), connections=256
    )
    return WorkerPool(config, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=60.0, help="seconds per reported interval")
    parser.add_argument("--out", type=Path, default=RESULTS / "soak-cpu.md")
    args = parser.parse_args(argv)
    images = RESULTS / "tmp" / "soak-images"
    _pngs(images)
    server = FerryProcess(ROOT / "model_repo")
    pools: list[WorkerPool] = []
    rows: list[str] = []
    totals = {s.name: [0, 0] for s in STREAMS}
    failures: dict[str, int] = {}
    try:
        server.wait_ready([s.model for s in STREAMS])
        process = psutil.Process(server.pid)
        pools = [_pool(server, stream, images) for stream in STREAMS]
        conns: dict[Connection, Stream] = {}
        for pool, stream in zip(pools, STREAMS, strict=True):
            for conn in pool.start([Load(rate=stream.rate, seed=hash(stream.name) % 1000)]):
                conns[conn] = stream
        started = time.monotonic()
        rss_start = process.memory_info().rss
        header = (
            "| minute | "
            + " | ".join(f"{s.name} ok / err / p50 / p99 ms" for s in STREAMS)
            + " | server RSS MiB | load avg |"
        )
        rows += [header, "|" + "---|" * (len(STREAMS) + 3)]
        print(header, flush=True)
        interval = 0
        while time.monotonic() - started < args.minutes * 60:
            interval += 1
            end = started + interval * args.interval
            latencies: dict[str, list[np.ndarray]] = {s.name: [] for s in STREAMS}
            errors = dict.fromkeys(latencies, 0)
            while (left := end - time.monotonic()) > 0:
                for conn in wait(list(conns), timeout=left):
                    message = conn.recv()
                    name = conns[conn].name
                    if message[0] == "records":
                        latencies[name].append(message[2])
                        errors[name] += len(message[3])
                    elif message[0] == "error":
                        raise RuntimeError(f"{name}: worker failed: {message[1]}")
            cells = []
            for stream in STREAMS:
                values = np.concatenate(latencies[stream.name]) if latencies[stream.name] else np.empty(0)
                totals[stream.name][0] += values.size
                totals[stream.name][1] += errors[stream.name]
                p50, p99 = (np.percentile(values, [50, 99]) / 1e3) if values.size else (float("nan"),) * 2
                cells.append(f"{values.size} / {errors[stream.name]} / {p50:.1f} / {p99:.1f}")
            rss = process.memory_info().rss / 2**20
            row = (
                f"| {interval * args.interval / 60:.1f} | "
                + " | ".join(cells)
                + f" | {rss:.0f} | {os.getloadavg()[0]:.1f} |"
            )
            rows.append(row)
            print(row, flush=True)
        for conn in conns:
            conn.send({"op": "stop"})
        for conn in conns:
            while True:
                message = conn.recv()
                if message[0] == "done":
                    for text, count in message[1]["failures"].items():
                        failures[text] = failures.get(text, 0) + count
                    break
        rss_end = process.memory_info().rss
    finally:
        for pool in pools:
            pool.close()
        server.stop()
    total_ok = sum(ok for ok, _ in totals.values())
    total_err = sum(err for _, err in totals.values())
    summary = [
        "",
        f"{args.minutes:g} minutes, {len(STREAMS)} open-loop streams (Poisson): "
        + ", ".join(f"{s.name} {s.rate:g}/s" for s in STREAMS)
        + ".",
        f"Answered: {total_ok} successes, {total_err} errors"
        + (f" ({'; '.join(f'{n} x {t}' for t, n in failures.items())})" if failures else "")
        + ".",
        f"Server RSS: {rss_start / 2**20:.0f} MiB after the first moments, {rss_end / 2**20:.0f} MiB at the end "
        f"({(rss_end - rss_start) / 2**20:+.1f} MiB).",
    ]
    text = "# Soak: mixed REST + gRPC, tensors + images, several models\n\n" + "\n".join(rows + summary) + "\n"
    args.out.write_text(text)
    print("\n".join(summary))
    return 1 if total_err else 0


if __name__ == "__main__":
    sys.exit(main())
