"""``ferry-client perf`` vs NVIDIA's perf_analyzer on the same server, model and concurrency.

Both tools measure the tiny ``simple`` model (pure serving overhead) in alternating runs
(ABAB..., order flipped each round), so drift on this noisy machine hits both alike; the table
gives the median requests/s of each and their ratio. perf_analyzer comes from the
tritonclient==2.41.1 wheel (see shared notes / docs): pass its path with --perf-analyzer and
make its libraries findable (LD_LIBRARY_PATH with libb64 and libcudart).

    python benchmarks/perf_tools.py --perf-analyzer /work/pa/bin/perf_analyzer --rounds 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from serving import ROOT, TMP, FerryProcess

RESULTS = ROOT / "benchmarks" / "results"
STABILITY = 25  # percent, for both tools: this shared 2-core VM rarely holds 10% over three windows
_PA_LINE = re.compile(r"Concurrency: (\d+), throughput: ([\d.]+) infer/sec")


def perf_analyzer(
    binary: str, server: FerryProcess, protocol: str, concurrency: int, window_ms: int, model: str = "simple"
) -> float:
    command = [
        binary,
        "-m",
        model,
        "-u",
        server.url(protocol),
        "-i",
        protocol,
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


def ferry_perf(server: FerryProcess, protocol: str, concurrency: int, window_ms: int) -> dict:
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
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    return json.loads(out.read_text())["steps"][0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=RESULTS / "perf-tools-cpu.md")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    server = FerryProcess(ROOT / "model_repo")
    rows = []
    try:
        server.wait_ready(["simple"])
        for protocol in ("http", "grpc"):
            for concurrency in levels:
                pa: list[float] = []
                ours: list[float] = []
                for round_ in range(args.rounds):
                    order = ("pa", "ferry") if round_ % 2 == 0 else ("ferry", "pa")
                    for tool in order:
                        if tool == "pa":
                            pa.append(perf_analyzer(args.perf_analyzer, server, protocol, concurrency, args.window_ms))
                        else:
                            step = ferry_perf(server, protocol, concurrency, args.window_ms)
                            assert step["server"]["requests"] == step["client_requests"]
                            ours.append(step["throughput"])
                    print(
                        f"{protocol} c={concurrency} round {round_ + 1}: perf_analyzer {pa[-1]:.0f}, "
                        f"ferry-client perf {ours[-1]:.0f} infer/s",
                        flush=True,
                    )
                rows.append((protocol, concurrency, statistics.median(pa), statistics.median(ours), pa, ours))
    finally:
        server.stop()
    lines = [
        "# ferry-client perf vs perf_analyzer (model `simple`, batch 1, same server, alternating runs)",
        "",
        f"{args.rounds} rounds of {args.window_ms} ms windows per tool and level "
        f"(stability {STABILITY}% for both); medians of the rounds.",
        "",
        "| protocol | concurrency | perf_analyzer infer/s | ferry-client perf infer/s | ratio | runs (pa / ferry) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for protocol, concurrency, pa_median, ours_median, pa, ours in rows:
        lines.append(
            f"| {protocol} | {concurrency} | {pa_median:.0f} | {ours_median:.0f} | "
            f"{ours_median / pa_median:.2f} | {', '.join(f'{v:.0f}' for v in pa)} / "
            f"{', '.join(f'{v:.0f}' for v in ours)} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
