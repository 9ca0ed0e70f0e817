"""``ferry-client perf`` vs NVIDIA's perf_analyzer on the same server, model and concurrency.

Both tools measure the tiny ``simple`` model (pure serving overhead) in alternating runs
(the order rotates each round), so drift on this noisy machine hits all alike; the table gives
the median requests/s of each and their ratio. Over gRPC each of ``--grpc-engines`` is a tool of
its own in the rotation. Every run also reports CPU per request the server answered during it: the
tool's (its processes and their children, from getrusage) and the server's (from /proc), so a tool
whose own cost takes CPU from the server, or whose requests are cheaper to serve, shows it. perf_analyzer comes from the
tritonclient==2.41.1 wheel (see shared notes / docs): pass its path with --perf-analyzer and
make its libraries findable (LD_LIBRARY_PATH with libb64 and libcudart).

    python benchmarks/perf_tools.py --perf-analyzer /work/pa/bin/perf_analyzer --rounds 3 \
        --protocols grpc --grpc-engines raw,grpcio
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import psutil
from serving import ROOT, TMP, FerryProcess

RESULTS = ROOT / "benchmarks" / "results"
STABILITY = 25  # percent, for both tools: this shared 2-core VM rarely holds 10% over three windows
_PA_LINE = re.compile(r"Concurrency: (\d+), throughput: ([\d.]+) infer/sec")


def perf_analyzer(
    binary: str, server: FerryProcess, protocol: str, concurrency: int, window_ms: int, model: str = "simple"
) -> float:
    """Infer/s of one perf_analyzer run; ``protocol`` "grpc-stream": gRPC with ``--streaming``
    (ModelStreamInfer, one stream per concurrent request)."""
    wire = "grpc" if protocol == "grpc-stream" else protocol
    command = [
        binary,
        "-m",
        model,
        "-u",
        server.url(wire),
        "-i",
        wire,
        *(["--streaming"] if protocol == "grpc-stream" else []),
        "-b",
        "1",
        "--concurrency-range",
        f"{concurrency}:{concurrency}",
        "--measurement-interval",
        str(window_ms),
        "--stability-percentage",
        str(STABILITY),
    ]
    out = ""
    for _ in range(3):  # it prints no figure at all when it cannot stabilise; try again
        result = subprocess.run([*command, "--max-trials", "20"], capture_output=True, text=True, timeout=600)
        out = result.stdout + result.stderr
        found = _PA_LINE.findall(out)
        if found:
            return float(found[-1][1])
    raise RuntimeError(f"perf_analyzer printed no result:\n{out[-2000:]}")


def ferry_perf(server: FerryProcess, protocol: str, concurrency: int, window_ms: int, engine: str = "") -> dict:
    out = TMP / "ferry-perf.json"
    command = [
        sys.executable,
        "-m",
        "ferry_client.cli",
        "perf",
        "-m",
        "simple",
        "-u",
        server.url(protocol),
        "-i",
        protocol,
        "--concurrency-range",
        str(concurrency),
        "--measurement-interval",
        str(window_ms),
        "--stability-percentage",
        str(STABILITY),
        "--max-trials",
        "20",
        "--json",
        str(out),
        "-q",
        *(["--grpc-engine", engine] if engine else []),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    return json.loads(out.read_text())["steps"][0]


def ferry_throughput(
    server: FerryProcess, protocol: str, concurrency: int, window_ms: int, engine: str
) -> tuple[float, float]:
    """Requests/s, and the workers' CPU per request while they measured (no start-up, no imports)."""
    step = ferry_perf(server, protocol, concurrency, window_ms, engine)
    assert step["server"]["requests"] == step["client_requests"]
    return step["throughput"], step["client_cores"] / step["throughput"] * 1e6


def pa_throughput(
    binary: str, server: FerryProcess, protocol: str, concurrency: int, window_ms: int
) -> tuple[float, float]:
    return perf_analyzer(binary, server, protocol, concurrency, window_ms), float("nan")


@dataclass(frozen=True)
class Run:
    throughput: float  # what the tool reported
    client_us: float  # the tool's CPU per request the server answered while it ran (start-up included)
    step_client_us: float  # ferry-client perf only: its workers' CPU per request in the measured windows
    server_us: float  # the server's CPU per request, same requests


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # finished tools and their reaped workers
    return usage.ru_utime + usage.ru_stime


def measured(server: FerryProcess, tool: Callable[[], tuple[float, float]]) -> Run:
    """Run one tool and charge the CPU it and the server used to the requests the server answered."""
    process = psutil.Process(server.pid)

    def sample() -> tuple[float, float, int]:
        times = process.cpu_times()
        success = server.stats("simple")["inference_stats"]["success"]["count"]
        return _children_cpu(), times.user + times.system, int(success)

    client0, server0, ok0 = sample()
    throughput, step_client_us = tool()
    client1, server1, ok1 = sample()
    answered = max(1, ok1 - ok0)
    return Run(throughput, (client1 - client0) / answered * 1e6, step_client_us, (server1 - server0) / answered * 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--grpc-engines", default="raw", help="ferry-client perf --grpc-engine values, comma-separated")
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=RESULTS / "perf-tools-cpu.md")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    server = FerryProcess(ROOT / "model_repo")
    rows = []
    try:
        server.wait_ready(["simple"])
        for protocol in args.protocols.split(","):
            engines = args.grpc_engines.split(",") if protocol == "grpc" else [""]
            for concurrency in levels:
                runs: dict[str, list[Run]] = {tool: [] for tool in ["pa", *engines]}
                for round_ in range(args.rounds):
                    shift = round_ % len(runs)
                    order = list(runs)[shift:] + list(runs)[:shift]
                    for tool in order:
                        if tool == "pa":
                            run = partial(
                                pa_throughput, args.perf_analyzer, server, protocol, concurrency, args.window_ms
                            )
                        else:
                            run = partial(ferry_throughput, server, protocol, concurrency, args.window_ms, tool)
                        runs[tool].append(measured(server, run))
                    print(
                        f"{protocol} c={concurrency} round {round_ + 1}: "
                        + ", ".join(
                            f"{'perf_analyzer' if t == 'pa' else 'ferry-client perf ' + (t or protocol)} "
                            f"{runs[t][-1].throughput:.0f} infer/s ({runs[t][-1].client_us:.0f} us client, "
                            f"{runs[t][-1].server_us:.0f} us server)"
                            for t in runs
                        ),
                        flush=True,
                    )
                rows += [(protocol, engine or "-", concurrency, runs["pa"], runs[engine]) for engine in engines]
    finally:
        server.stop()
    lines = [
        "# ferry-client perf vs perf_analyzer (model `simple`, batch 1, same server, alternating runs)",
        "",
        f"{args.rounds} rounds of {args.window_ms} ms windows per tool and level "
        f"(stability {STABILITY}% for both); medians of the rounds. CPU columns: microseconds of CPU per "
        "request the server answered during the run, start-up included (the tool's processes / the server's "
        "process); in the measured windows alone, ferry-client perf's workers used the CPU per request in the "
        "'ferry steady' column.",
        "",
        "| protocol | engine | concurrency | perf_analyzer infer/s | ferry-client perf infer/s | ratio "
        "| client CPU us/req (pa / ferry) | ferry steady | server CPU us/req (pa / ferry) "
        "| runs infer/s (pa / ferry) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def median(values: list[Run], field: str) -> float:
        return statistics.median(getattr(run, field) for run in values)

    for protocol, engine, concurrency, pa, ours in rows:
        pa_median, ours_median = median(pa, "throughput"), median(ours, "throughput")
        lines.append(
            f"| {protocol} | {engine} | {concurrency} | {pa_median:.0f} | {ours_median:.0f} | "
            f"{ours_median / pa_median:.2f} | {median(pa, 'client_us'):.0f} / {median(ours, 'client_us'):.0f} | "
            f"{median(ours, 'step_client_us'):.0f} | "
            f"{median(pa, 'server_us'):.0f} / {median(ours, 'server_us'):.0f} | "
            f"{', '.join(f'{r.throughput:.0f}' for r in pa)} / {', '.join(f'{r.throughput:.0f}' for r in ours)} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
