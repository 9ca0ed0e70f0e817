"""Tiny-model CPU per request over REST and gRPC: this checkout against baseline checkouts.

The per-request path (one ``infer`` of the tiny ``simple`` model) measured as benchmarks/intake.py
measures it (perf_analyzer at ``--concurrency``, server CPU from /proc over the successful request
count), without its ResNet-50 workloads, so a change to the per-call path can be checked in
minutes. One server per checkout (``--intakes 2`` adds a two-intake server of each) runs side by
side on one repository; rounds are interleaved with the server order rotated. Prints a table of
medians with each server's ratio to the first baseline.

    LD_LIBRARY_PATH=... python benchmarks/tiny_cpu.py --perf-analyzer /tmp/pa/venv/bin/perf_analyzer \\
        --baseline before=/tmp/base --baseline previous=/tmp/prev --rounds 5 [--protocols http grpc grpc-stream] \\
        [--intakes 2] [--variant "stream turns=--grpc-stream-reads-per-peer 1"]

``grpc-stream`` runs perf_analyzer with ``--streaming`` (one ModelStreamInfer stream per concurrent
request); ``--variant`` adds a server of this checkout with other flags.
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
    parser.add_argument(
        "--baseline", action="append", required=True, metavar="NAME=CHECKOUT", help="a checkout to compare against"
    )
    parser.add_argument("--protocols", nargs="+", default=["http", "grpc"], choices=["http", "grpc", "grpc-stream"])
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help="also a server of this checkout started with these flags (space-separated)",
    )
    parser.add_argument("--intakes", type=int, default=1, help="also run each checkout with this many intakes (>1)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--window-ms", type=int, default=2000)
    args = parser.parse_args(argv)
    repo = Path(tempfile.mkdtemp(prefix="ferry-tiny-"))
    shutil.copytree(ROOT / "model_repo" / "simple", repo / "simple")
    launchers: dict[str, tuple[str, ...]] = {}
    for spec in args.baseline:
        name, _, checkout = spec.partition("=")
        launchers[name] = ("env", f"PYTHONPATH={Path(checkout).resolve() / 'server'}", sys.executable, "-m", "ferry")
    launchers["this"] = (sys.executable, "-m", "ferry")
    servers = {name: FerryProcess(repo, launcher) for name, launcher in launchers.items()}
    for spec in args.variant:
        name, _, flags = spec.partition("=")
        servers[name] = FerryProcess(repo, launchers["this"], extra=tuple(flags.split()))
    if args.intakes > 1:
        extra = ("--intake-processes", str(args.intakes))
        servers.update(
            {
                f"{name}, {args.intakes} intakes": FerryProcess(repo, launcher, extra=extra)
                for name, launcher in launchers.items()
            }
        )
    results = {(name, protocol): Runs() for name in servers for protocol in args.protocols}
    try:
        for server in servers.values():
            server.wait_ready(["simple"])
        names = list(servers)
        for round_ in range(args.rounds):
            for protocol in args.protocols:
                for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                    runs = results[(name, protocol)]
                    measure(
                        args.perf_analyzer, servers[name], protocol, "simple", args.concurrency, args.window_ms, runs
                    )
                    speed, cpu = runs.throughput[-1], runs.total_us[-1]
                    print(f"round {round_ + 1} {protocol} {name}: {speed:.0f} infer/s, {cpu:.0f} us CPU", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    first = names[0]
    print(f"\n{args.rounds} interleaved rounds, concurrency {args.concurrency}, {args.window_ms} ms windows; medians.")
    print(
        f"| protocol | server | infer/s | vs {first} | CPU us/request (model + intakes) | vs {first} | runs (CPU us) |"
    )
    print("|---|---|---:|---:|---:|---:|---|")
    for protocol in args.protocols:
        base = results[(first, protocol)]
        base_speed, base_cpu = statistics.median(base.throughput), statistics.median(base.total_us)
        for name in names:
            runs = results[(name, protocol)]
            speed, cpu = statistics.median(runs.throughput), statistics.median(runs.total_us)
            print(
                f"| {protocol} | {name} | {speed:.0f} | {speed / base_speed:.3f} | {cpu:.0f} "
                f"({statistics.median(runs.model_us):.0f} + {statistics.median(runs.intake_us):.0f}) | "
                f"{cpu / base_cpu:.3f} | {', '.join(str(round(v)) for v in runs.total_us)} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
