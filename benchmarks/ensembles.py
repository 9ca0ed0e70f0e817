"""Ensemble benchmark: the same two-stage work as separate client calls per stage and as one
ensemble request, at concurrency 1 and 16, in one run against one server.

Stages: two MLP models (``y = x @ W1 .. @ Wn``, width 256, 6 layers each, dynamic batching), the
second fed the first's output. (a) "separate": the client calls stage 1, then sends its output to
stage 2. (b) "ensemble": one request to an ensemble of the two. Closed-loop gRPC clients (one
thread each, tritonclient); each cell is the median of repeated measurement windows.

Also reported at concurrency 1: the ensemble's server-side mean request time against the sum of
its steps' server-side mean request times over the same window (what the ensemble adds in-process).

Run: python benchmarks/ensembles.py [--window S] [--windows N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as tgrpc

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))
from serving import FerryProcess  # noqa: E402

from tests.models import write_mlp_model  # noqa: E402

WIDTH = 256
LAYERS = 6
CONCURRENCY = (1, 16)
ENSEMBLE = f"""name: "two_stage"
platform: "ensemble"
max_batch_size: 16
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "stage1" model_version: -1
     input_map {{ key: "x" value: "x" }} output_map {{ key: "y" value: "mid" }} }},
  {{ model_name: "stage2" model_version: -1
     input_map {{ key: "x" value: "mid" }} output_map {{ key: "y" value: "y" }} }}
] }}
"""


def build_repo(repo: Path) -> Path:
    for name, offset in (("stage1", 1.0), ("stage2", 2.0)):
        write_mlp_model(
            repo / name,
            width=WIDTH,
            layers=LAYERS,
            offset=offset,
            max_batch_size=16,
            extra_config="dynamic_batching { }\n",
        )
    (repo / "two_stage" / "1").mkdir(parents=True)
    (repo / "two_stage" / "config.pbtxt").write_text(ENSEMBLE)
    return repo


def _input(name: str, array: np.ndarray) -> tgrpc.InferInput:
    tensor = tgrpc.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


def separate(client: tgrpc.InferenceServerClient, x: np.ndarray) -> np.ndarray:
    mid = client.infer("stage1", [_input("x", x)]).as_numpy("y")
    return client.infer("stage2", [_input("x", mid)]).as_numpy("y")


def ensemble(client: tgrpc.InferenceServerClient, x: np.ndarray) -> np.ndarray:
    return client.infer("two_stage", [_input("x", x)]).as_numpy("y")


def window(server: FerryProcess, call, concurrency: int, seconds: float) -> tuple[float, float]:
    """One closed-loop window: (requests/s, median client latency in ms)."""
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    start = threading.Barrier(concurrency + 1)
    stop_at = [float("inf")]

    def client(index: int) -> None:
        c = tgrpc.InferenceServerClient(server.grpc_url)
        x = np.random.default_rng(index).standard_normal((1, WIDTH)).astype(np.float32)
        y = call(c, x)
        assert np.allclose(y, x + 3.0, atol=1e-3), "wrong answer"
        start.wait()
        while (t0 := time.perf_counter()) < stop_at[0]:
            call(c, x)
            latencies[index].append(time.perf_counter() - t0)
        c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    stop_at[0] = began + seconds
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    done = [v for per in latencies for v in per]
    return len(done) / elapsed, statistics.median(done) * 1e3


def mean_request_us(before: dict, after: dict) -> float:
    """Mean server-side request duration between two statistics snapshots."""
    count = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    ns = after["inference_stats"]["success"]["ns"] - before["inference_stats"]["success"]["ns"]
    return ns / max(count, 1) / 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", type=float, default=3.0, help="seconds per measurement window (3)")
    parser.add_argument("--windows", type=int, default=5, help="windows per cell; the median is reported (5)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repo(Path(tmp) / "models")
        server = FerryProcess(repo)
        try:
            server.wait_ready(["stage1", "stage2", "two_stage"])
            rows = []
            overhead = None
            for concurrency in CONCURRENCY:
                cells = {}
                for label, call in (("separate", separate), ("ensemble", ensemble)):
                    window(server, call, concurrency, 1.0)  # warm-up
                    names = ("stage1", "stage2", "two_stage")
                    before = {n: server.stats(n) for n in names}
                    results = [window(server, call, concurrency, args.window) for _ in range(args.windows)]
                    after = {n: server.stats(n) for n in names}
                    cells[label] = (
                        statistics.median(r[0] for r in results),
                        statistics.median(r[1] for r in results),
                    )
                    if label == "ensemble" and concurrency == 1:
                        steps = mean_request_us(before["stage1"], after["stage1"]) + mean_request_us(
                            before["stage2"], after["stage2"]
                        )
                        overhead = (mean_request_us(before["two_stage"], after["two_stage"]), steps)
                rows.append((concurrency, cells))
        finally:
            server.stop()
    print(f"two MLP stages (width {WIDTH}, {LAYERS} layers each), gRPC, median of {args.windows} x {args.window:g} s")
    print()
    print("| concurrency | separate req/s | ensemble req/s | ratio | separate p50 ms | ensemble p50 ms | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for concurrency, cells in rows:
        (sep_rps, sep_ms), (ens_rps, ens_ms) = cells["separate"], cells["ensemble"]
        print(
            f"| {concurrency} | {sep_rps:.0f} | {ens_rps:.0f} | {ens_rps / sep_rps:.2f}x "
            f"| {sep_ms:.2f} | {ens_ms:.2f} | {ens_ms / sep_ms:.2f}x |"
        )
    if overhead is not None:
        ensemble_us, steps_us = overhead
        print()
        print(
            f"server side at concurrency 1: ensemble request {ensemble_us:.0f} us, sum of its steps {steps_us:.0f} us, "
            f"ratio {ensemble_us / steps_us:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
