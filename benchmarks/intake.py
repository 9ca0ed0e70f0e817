"""Request intake: server CPU per request and requests/s with one and with several intake processes.

Servers run side by side on free ports, all on one repository holding the tiny ``simple`` model
and ResNet-50 (benchmarks/models.py):

- ``baseline``: a checkout of the code to compare against (``--baseline``, e.g. a detached
  worktree of main before issue 20), one process as it always was;
- ``1 intake``: this checkout with ``--intake-processes 1`` (one process, no hand-off);
- ``N intakes``: this checkout with ``--intake-processes N`` for each N in ``--intakes``.

perf_analyzer (C++, so the load generator takes as little of the shared CPU as possible) drives
the tiny model over REST and gRPC at ``--concurrency`` and ResNet-50 (batch 1, the server's
dynamic batching) over gRPC at ``--resnet-concurrency``, in interleaved rounds with the server
order rotated each round. For every tiny run the CPU time (utime + stime from /proc) of the model
process and of its intake processes is read before and after, with the successful request count
(statistics API), so CPU per request is exact whatever warm-up perf_analyzer does. Raw in-process
ONNX Runtime throughput of ResNet-50 (best of batch 1, 8, 16) is measured in every round too, so
"served / raw" compares figures of the same minutes. Medians over the rounds, and a projection to
a 16-core GPU server from the per-request CPU, go to ``benchmarks/results/intake-cpu.md``.

    git -C . worktree add --detach /tmp/intake-base <commit>
    LD_LIBRARY_PATH=... python benchmarks/intake.py --perf-analyzer /tmp/pa/venv/bin/perf_analyzer \\
        --baseline /tmp/intake-base --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import models
from perf_tools import perf_analyzer
from serving import ROOT, FerryProcess, cpu_seconds, make_session, raw_window

RESULTS = ROOT / "benchmarks" / "results"
RAW_BATCHES = (1, 8, 16)
PROJECTED_CORES = 16


def served(server: FerryProcess, model: str) -> int:
    return int(server.stats(model)["inference_stats"]["success"]["count"])


@dataclass
class Runs:
    """Every window of one (server, workload) pair."""

    throughput: list[float] = field(default_factory=list)
    model_us: list[float] = field(default_factory=list)  # model process CPU per request
    intake_us: list[float] = field(default_factory=list)  # intake processes' CPU per request

    @property
    def total_us(self) -> list[float]:
        return [a + b for a, b in zip(self.model_us, self.intake_us, strict=True)]


def measure(binary: str, server: FerryProcess, protocol: str, model: str, concurrency: int, window_ms: int, runs: Runs):
    (own0, below0), count0 = cpu_seconds(server.pid), served(server, model)
    runs.throughput.append(perf_analyzer(binary, server, protocol, concurrency, window_ms, model=model))
    (own1, below1), count1 = cpu_seconds(server.pid), served(server, model)
    requests = max(1, count1 - count0)
    runs.model_us.append((own1 - own0) / requests * 1e6)
    runs.intake_us.append((below1 - below0) / requests * 1e6)


def _repository(directory: Path) -> Path:
    """One repository with the tiny model and ResNet-50 (copies: the server refuses symlinks that
    leave the repository)."""
    bench_repo = models.build_repository()
    shutil.copytree(ROOT / "model_repo" / "simple", directory / "simple")
    shutil.copytree(bench_repo / "resnet50", directory / "resnet50")
    return directory


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def projection(results: dict[tuple[str, str], Runs], names: list[str], protocol: str) -> list[str]:
    """Requests/s ceilings of the serving path alone on a 16-core server (the GPU does the model).

    One process: every request's intake and scheduling share one event loop, so one core divided
    by the CPU per request. With K intake processes: the least of the model process's loop (one
    core / its CPU per request), the intakes (K cores / their CPU per request) and the machine
    (16 cores / the total)."""
    lines = []
    for name in names:
        runs = results[(name, f"tiny {protocol}")]
        model_us, intake_us = _median(runs.model_us), _median(runs.intake_us)
        if intake_us < 1:  # one process
            lines.append(f"| {protocol} | {name}: one process | {1e6 / model_us:,.0f} |")
            continue
        for k in (2, 4, 8):
            ceiling = min(1e6 / model_us, k * 1e6 / intake_us, PROJECTED_CORES * 1e6 / (model_us + intake_us))
            lines.append(f"| {protocol} | {k} intake processes (per-request CPU of '{name}') | {ceiling:,.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", required=True)
    parser.add_argument("--baseline", type=Path, help="checkout of the code to compare against")
    parser.add_argument("--intakes", type=int, nargs="+", default=[2], help="intake process counts besides 1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--resnet-concurrency", type=int, default=8)
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument("--resnet-window-ms", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=RESULTS / "intake-cpu.md")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="ferry-intake-bench-"))
    repo = _repository(workdir)
    session = make_session(repo / "resnet50" / "1" / "model.onnx")
    servers: dict[str, FerryProcess] = {}
    if args.baseline is not None:
        launcher = ("env", f"PYTHONPATH={args.baseline.resolve() / 'server'}", sys.executable, "-m", "ferry")
        servers["baseline"] = FerryProcess(repo, launcher)
    servers["1 intake"] = FerryProcess(repo, extra=("--intake-processes", "1"))
    for count in args.intakes:
        servers[f"{count} intakes"] = FerryProcess(repo, extra=("--intake-processes", str(count)))
    workloads = [
        ("tiny http", "http", "simple", args.concurrency, args.window_ms),
        ("tiny grpc", "grpc", "simple", args.concurrency, args.window_ms),
        ("resnet50 grpc", "grpc", "resnet50", args.resnet_concurrency, args.resnet_window_ms),
    ]
    results: dict[tuple[str, str], Runs] = {}
    raw: list[float] = []
    try:
        for server in servers.values():
            server.wait_ready(["simple", "resnet50"])
        names = list(servers)
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            raw.append(max(raw_window(session, batch, 2.0)["throughput"] for batch in RAW_BATCHES))
            print(f"round {round_ + 1} raw ResNet-50: {raw[-1]:.1f} img/s", flush=True)
            for name in order:
                for label, protocol, model, concurrency, window in workloads:
                    runs = results.setdefault((name, label), Runs())
                    measure(args.perf_analyzer, servers[name], protocol, model, concurrency, window, runs)
                    print(
                        f"round {round_ + 1} {name} {label}: {runs.throughput[-1]:.1f} infer/s, CPU per request "
                        f"{runs.model_us[-1]:.0f} us model process + {runs.intake_us[-1]:.0f} us intake",
                        flush=True,
                    )
    finally:
        for server in servers.values():
            server.stop()
    raw_best = _median(raw)
    reference = "baseline" if "baseline" in servers else "1 intake"
    lines = [
        f"# Request intake: one and several intake processes ({os.cpu_count()} cores, perf_analyzer)",
        "",
        f"`python benchmarks/intake.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
        "",
        f"{args.rounds} interleaved rounds; medians. Tiny model `simple` at concurrency {args.concurrency} "
        f"({args.window_ms} ms windows); ResNet-50 batch 1 at concurrency {args.resnet_concurrency} "
        f"({args.resnet_window_ms} ms windows), raw in-process best {raw_best:.1f} img/s. Server CPU per "
        "request from /proc: the model process and its intake processes.",
        "",
        f"| workload | server | infer/s | vs {reference} | CPU us/request (model + intake) | {reference} CPU / this "
        "| runs (infer/s) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for label, *_ in workloads:
        base = results[(reference, label)]
        for name in servers:
            runs = results[(name, label)]
            speed = _median(runs.throughput)
            cpu = _median(runs.total_us)
            extra = f" (served / raw {speed / raw_best:.2f})" if label.startswith("resnet") else ""
            lines.append(
                f"| {label} | {name} | {speed:.1f}{extra} | {speed / _median(base.throughput):.2f}x | "
                f"{cpu:.0f} ({_median(runs.model_us):.0f} + {_median(runs.intake_us):.0f}) | "
                f"{_median(base.total_us) / cpu:.2f}x | {', '.join(f'{v:.0f}' for v in runs.throughput)} |"
            )
    lines += [
        "",
        f"## Projection: serving-path ceiling on a {PROJECTED_CORES}-core GPU server (on paper)",
        "",
        "From the CPU per request above, the model's own compute left to the GPU: one process is capped by its one "
        "event loop (1 core / CPU per request); with K intake processes the cap is the least of the model "
        "process's loop (1 core / its share), the intakes (K cores / theirs) and the machine "
        f"({PROJECTED_CORES} cores / the total).",
        "",
        "| protocol | server | requests/s ceiling |",
        "|---|---|---:|",
    ]
    for protocol in ("http", "grpc"):
        lines += projection(results, list(servers), protocol)
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
