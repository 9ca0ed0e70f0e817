"""Tiny-model gRPC CPU per request: this checkout against a baseline checkout, nothing else.

The gRPC hot path (one unary ``ModelInfer`` of the tiny ``simple`` model) measured as
benchmarks/intake.py measures it (perf_analyzer at ``--concurrency``, server CPU from /proc over the
successful request count), without its REST and ResNet-50 workloads, so a change to the per-call
path can be checked in minutes. Servers, one process and ``--intake-processes 2`` of each checkout,
run side by side; rounds are interleaved with the order rotated. Medians are printed.

    LD_LIBRARY_PATH=... python benchmarks/tiny_grpc_cpu.py --perf-analyzer /tmp/pa/venv/bin/perf_analyzer \\
        --baseline /tmp/base --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from intake import Runs, measure
from serving import ROOT, FerryProcess


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", required=True)
    parser.add_argument("--baseline", type=Path, required=True, help="checkout of the code to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--window-ms", type=int, default=2000)
    args = parser.parse_args(argv)
    repo = Path(tempfile.mkdtemp(prefix="ferry-tiny-grpc-"))
    shutil.copytree(ROOT / "model_repo" / "simple", repo / "simple")
    baseline = ("env", f"PYTHONPATH={args.baseline.resolve() / 'server'}", sys.executable, "-m", "ferry")
    intakes = ("--intake-processes", "2")
    servers = {
        "baseline, one process": FerryProcess(repo, baseline),
        "this, one process": FerryProcess(repo),
        "baseline, 2 intakes": FerryProcess(repo, baseline, extra=intakes),
        "this, 2 intakes": FerryProcess(repo, extra=intakes),
    }
    results = {name: Runs() for name in servers}
    try:
        for server in servers.values():
            server.wait_ready(["simple"])
        names = list(servers)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                runs = results[name]
                measure(args.perf_analyzer, servers[name], "grpc", "simple", args.concurrency, args.window_ms, runs)
                speed, cpu = runs.throughput[-1], runs.total_us[-1]
                print(f"round {round_ + 1} {name}: {speed:.0f} infer/s, {cpu:.0f} us CPU/request", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    for name, runs in results.items():
        print(
            f"{name}: median {statistics.median(runs.total_us):.0f} us CPU/request (model "
            f"{statistics.median(runs.model_us):.0f} + intakes {statistics.median(runs.intake_us):.0f}), "
            f"{statistics.median(runs.throughput):.0f} infer/s; runs {[round(v) for v in runs.total_us]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
