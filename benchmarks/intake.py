"""Request intake cost: server CPU per request and requests/s for the tiny model, before and after.

Two servers run side by side on free ports: this checkout and a baseline checkout (by default a
detached worktree of main, passed with --baseline). perf_analyzer (C++, so the load generator
takes as little of the shared CPU as possible) drives the ``simple`` model at one concurrency over
REST and gRPC in interleaved rounds (order flipped each round). For every run the server's CPU
time (utime + stime of the server process and all its descendants, from /proc) and its
successful request count (statistics API) are read before and after, so CPU per request is
exact whatever warm-up perf_analyzer does. The table gives medians over the rounds.

    LD_LIBRARY_PATH=... python benchmarks/intake.py --perf-analyzer /tmp/pa/venv/bin/perf_analyzer \\
        --baseline /tmp/intake-base --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from perf_tools import perf_analyzer
from serving import ROOT, FerryProcess, _process_jiffies

RESULTS = ROOT / "benchmarks" / "results"
TICK = os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (intake workers, if any)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found.extend(_descendants(int(child)))
    return found


def server_cpu_seconds(pid: int) -> float:
    """CPU time so far of the server process tree."""
    return sum(_process_jiffies(p) for p in _descendants(pid)) / TICK


def served_requests(server: FerryProcess) -> int:
    return int(server.stats("simple")["inference_stats"]["success"]["count"])


@dataclass
class Runs:
    """Every window of one (server, protocol) pair."""

    throughput: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)


def measure(binary: str, server: FerryProcess, protocol: str, concurrency: int, window_ms: int, runs: Runs) -> None:
    cpu0, count0 = server_cpu_seconds(server.pid), served_requests(server)
    runs.throughput.append(perf_analyzer(binary, server, protocol, concurrency, window_ms))
    cpu1, count1 = server_cpu_seconds(server.pid), served_requests(server)
    runs.cpu_us.append((cpu1 - cpu0) / max(1, count1 - count0) * 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", required=True)
    parser.add_argument("--baseline", type=Path, required=True, help="checkout of the code to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=RESULTS / "intake-cpu.md")
    args = parser.parse_args(argv)
    baseline_launcher = ("env", f"PYTHONPATH={args.baseline.resolve() / 'server'}", sys.executable, "-m", "ferry")
    servers = {
        "baseline": FerryProcess(ROOT / "model_repo", baseline_launcher),
        "this checkout": FerryProcess(ROOT / "model_repo"),
    }
    results: dict[tuple[str, str], Runs] = {}
    try:
        for server in servers.values():
            server.wait_ready(["simple"])
        for round_ in range(args.rounds):
            names = list(servers) if round_ % 2 == 0 else list(reversed(servers))
            for name in names:
                for protocol in ("http", "grpc"):
                    runs = results.setdefault((name, protocol), Runs())
                    measure(args.perf_analyzer, servers[name], protocol, args.concurrency, args.window_ms, runs)
                    print(
                        f"round {round_ + 1} {name} {protocol}: {runs.throughput[-1]:.0f} infer/s, "
                        f"{runs.cpu_us[-1]:.0f} us server CPU per request",
                        flush=True,
                    )
    finally:
        for server in servers.values():
            server.stop()
    lines = [
        f"# Request intake: tiny model `simple`, batch 1, concurrency {args.concurrency} (perf_analyzer)",
        "",
        f"{args.rounds} interleaved rounds of {args.window_ms} ms windows; medians. Server CPU is the "
        "whole server process tree (utime + stime from /proc) divided by the requests it served.",
        "",
        "| protocol | server | infer/s | server CPU us / request | runs (infer/s) |",
        "|---|---|---:|---:|---|",
    ]
    for protocol in ("http", "grpc"):
        for name in servers:
            runs = results[(name, protocol)]
            lines.append(
                f"| {protocol} | {name} | {statistics.median(runs.throughput):.0f} | "
                f"{statistics.median(runs.cpu_us):.0f} | {', '.join(f'{v:.0f}' for v in runs.throughput)} |"
            )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
