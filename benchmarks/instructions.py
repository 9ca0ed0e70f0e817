"""Instructions per request: the host path's cost counted, not timed (valgrind's callgrind).

Why: on a shared 2-core machine a server's CPU time per request moves by 15-30 % from one run to
the next, and interleaved medians of a few rounds still leave a 10 % difference unreadable. The
instructions a server executes per request do not move with its neighbours: callgrind counts
them to within 0.5 % from run to run, so a change of a few percent on the host path can be seen
in one run.

Each server (this checkout, and with ``--baseline CHECKOUT`` another one, e.g. a ``git worktree
add --detach /tmp/main-base main``) runs under callgrind with its instrumentation off while it
starts and takes a warm-up load; then, for each model and protocol, the counters are zeroed,
instrumentation is switched on, perf_analyzer sends ``--requests`` batch-1 requests at
``--concurrency`` (count windows), instrumentation is switched off and the counters read (every
thread of the server's process, and of its intake processes with ``--intakes``). Instructions per
request = that count over the requests the server answered meanwhile (statistics API). The server
runs ~50x slower under callgrind, so perf_analyzer's own figures mean nothing here and are not
shown; the batches the server formed are (they decide what a request costs).

What it does not see: time spent waiting (locks, the GIL, the kernel's scheduling), cache and
branch behaviour of the real machine, and the kernel's work (syscalls count as one instruction).
So it is for comparing two checkouts on the same path, next to ``host_path.py``'s timed figures,
not instead of them.

``--grpc-floor`` also counts grpcio alone (``grpc_floor.py``: what no gRPC intake can skip) on the
602 KB model over gRPC, and prints each server's gRPC intakes (or one process) over it: what
Ferry adds to grpcio, and the least a gRPC intake can cost.

    git worktree add --detach /tmp/main-base main
    LD_LIBRARY_PATH=... python benchmarks/instructions.py --perf-analyzer /tmp/pa/venv/bin/perf_analyzer \\
        --baseline /tmp/main-base --tiny
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from host_path import MODEL, TINY, GrpcFloorProcess, build_repository, counts
from serving import FerryProcess, descendant_pids, publish

#: Instrumentation off until a run switches it on; intake processes are counted too (traced children).
CALLGRIND = (
    "valgrind",
    "--tool=callgrind",
    "--instr-atstart=no",
    "--trace-children=yes",
    "--callgrind-out-file=/dev/null",
)
FLOOR = "grpcio floor"
#: A thread's line in ``callgrind_control -e Ir``: "   Th 1   80,497,611 ".
THREAD_LINE = re.compile(r"^\s*Th\s+\d+\s+([\d,]+)\s*$")


@dataclass
class Count:
    """One measurement: instructions of the model process and of its intakes, per request."""

    requests: int
    batch: float
    model_ir: float
    intakes_ir: float


def callgrind_control(*args: str) -> str:
    return subprocess.run(["callgrind_control", *args], capture_output=True, text=True, check=True, timeout=120).stdout


def instructions(pid: int) -> int:
    """Instructions counted so far in every thread of the callgrind run ``pid``."""
    return sum(
        int(m.group(1).replace(",", ""))
        for line in callgrind_control("-e", "Ir", str(pid)).splitlines()
        if (m := THREAD_LINE.match(line))
    )


def load(binary: str, server: FerryProcess, model: str, protocol: str, requests: int, concurrency: int) -> None:
    """``requests`` batch-1 requests (at least) at ``concurrency``; perf_analyzer's verdict is ignored:
    under callgrind its windows never agree, and only the server's counts are read."""
    command = [
        binary,
        *("-m", model, "-u", server.url(protocol), "-i", protocol, "-b", "1"),
        *("--concurrency-range", f"{concurrency}:{concurrency}"),
        *("--measurement-mode", "count_windows", "--measurement-request-count", str(requests)),
        *("--max-trials", "1", "--stability-percentage", "999"),
    ]
    subprocess.run(command, capture_output=True, timeout=1800)


def measure(binary: str, server: FerryProcess, model: str, protocol: str, args: argparse.Namespace) -> Count:
    model_pid, intake_pids = server.pid, descendant_pids(server.pid)
    pids = [model_pid, *intake_pids]
    for pid in pids:
        callgrind_control("-z", str(pid))
        callgrind_control("-i", "on", str(pid))
    requests0, items0, executions0 = counts(server, model)
    load(binary, server, model, protocol, args.requests, args.concurrency)
    requests1, items1, executions1 = counts(server, model)
    model_ir, intakes_ir = instructions(model_pid), sum(instructions(pid) for pid in intake_pids)
    for pid in pids:  # (read first: switched off, a run's counters read 0)
        callgrind_control("-i", "off", str(pid))
    served = max(1, requests1 - requests0)
    return Count(served, (items1 - items0) / max(1, executions1 - executions0), model_ir / served, intakes_ir / served)


def report(results: dict[tuple[str, str, str], list[Count]], args: argparse.Namespace) -> str:
    """The table of every run, by model, protocol and server, and the ratios to the baseline."""
    results = {key: results[key] for key in sorted(results, key=lambda k: (k[1], k[2], k[0]))}
    lines = [
        "# Instructions per request (callgrind, perf_analyzer)",
        "",
        f"`python benchmarks/instructions.py {' '.join(sys.argv[1:])}`",
        "",
        f"Batch-1 requests at concurrency {args.concurrency}, at least {args.requests} per run; instructions of every "
        "thread of the server's processes (model process; intakes) over the requests answered (statistics API). "
        "Callgrind's counts, not time: see the module docstring for what they leave out.",
        "",
        "| model | protocol | server | requests | avg batch | model Ir/req | intakes Ir/req | server Ir/req "
        "| runs (server Ir/req) |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for (server, model, protocol), runs in results.items():
        last = runs[-1]
        totals = ", ".join(f"{(run.model_ir + run.intakes_ir) / 1e3:,.0f}k" for run in runs)
        lines.append(
            f"| {model} | {protocol} | {server} | {last.requests} | {last.batch:.2f} | {last.model_ir / 1e3:,.0f}k | "
            f"{last.intakes_ir / 1e3:,.0f}k | {(last.model_ir + last.intakes_ir) / 1e3:,.0f}k | {totals} |"
        )
    floor = results.get((FLOOR, MODEL, "grpc"))
    if floor:
        lines += [
            "",
            "## Over grpcio alone (the 602 KB model over gRPC, last run of each)",
            "",
            "| server | avg batch | gRPC front door Ir/req | / grpcio floor | server Ir/req | / grpcio floor |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        base = floor[-1].model_ir
        for (server, model, protocol), runs in results.items():
            if model != MODEL or protocol != "grpc" or server == FLOOR:
                continue
            run = runs[-1]
            door = run.intakes_ir or run.model_ir  # the intakes, or the one process that is the door too
            total = run.model_ir + run.intakes_ir
            lines.append(
                f"| {server} | {run.batch:.2f} | {door / 1e3:,.0f}k | {door / base:.3f}x "
                f"| {total / 1e3:,.0f}k | {total / base:.3f}x |"
            )
    if args.baseline is not None:
        lines += [
            "",
            "## This checkout / baseline (last run of each)",
            "",
            "| model | protocol | mode | avg batch (this, baseline) | model Ir/req | intakes Ir/req | server Ir/req |",
            "|---|---|---|---|---:|---:|---:|",
        ]
        for (server, model, protocol), runs in results.items():
            base = results.get((server.replace("this", "baseline", 1), model, protocol))
            if not server.startswith("this") or not base:
                continue
            this, it = runs[-1], base[-1]
            intakes = f"{this.intakes_ir / it.intakes_ir:.3f}x" if it.intakes_ir else "-"
            lines.append(
                f"| {model} | {protocol} | {server.split(', ', 1)[1]} | {this.batch:.2f}, {it.batch:.2f} "
                f"| {this.model_ir / it.model_ir:.3f}x | {intakes} "
                f"| {(this.model_ir + this.intakes_ir) / (it.model_ir + it.intakes_ir):.3f}x |"
            )
    return "\n".join(lines) + "\n"


def count_all(
    binary: str,
    server: FerryProcess,
    name: str,
    served: list[tuple[str, str]],
    args: argparse.Namespace,
    results: dict[tuple[str, str, str], list[Count]],
) -> None:
    """Count ``server`` (started under callgrind) on each (model, protocol) it serves, after a
    warm-up of each, into ``results`` under ``name``; the server is stopped after."""
    try:
        server.wait_ready(sorted({model for model, _ in served}), timeout=900)
        for model, protocol in served:
            load(binary, server, model, protocol, 50, args.concurrency)  # warm-up, not counted
            for _ in range(args.runs):
                count = measure(binary, server, model, protocol, args)
                results.setdefault((name, model, protocol), []).append(count)
                print(
                    f"{name} {model} {protocol}: {count.requests} requests, batch {count.batch:.2f}, "
                    f"Ir/req model {count.model_ir:,.0f} intakes {count.intakes_ir:,.0f}",
                    flush=True,
                )
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--perf-analyzer", help="its path (default: perf_analyzer on PATH)")
    parser.add_argument(
        "--baseline", type=Path, help="another checkout to count the same way (e.g. a worktree of main)"
    )
    parser.add_argument("--requests", type=int, default=300, help="requests per run, at least")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--runs", type=int, default=1, help="runs of each (model, protocol) per server")
    parser.add_argument("--protocols", nargs="+", choices=("grpc", "http"), default=["grpc", "http"])
    parser.add_argument("--intakes", type=int, default=0, help="also count a server with this many intake processes")
    parser.add_argument("--tiny", action="store_true", help=f"also serve model_repo's tiny '{TINY}' model")
    parser.add_argument(
        "--grpc-floor", action="store_true", help="also count grpcio alone (grpc_floor.py) on the 602 KB model"
    )
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    binary = args.perf_analyzer or shutil.which("perf_analyzer")
    if binary is None or shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("needs perf_analyzer (--perf-analyzer) and valgrind (callgrind_control) on this machine")
    workdir = Path(tempfile.mkdtemp(prefix="ferry-instructions-"))
    models = [name for name in build_repository(workdir / "models", args.tiny) if name in (MODEL, TINY)]
    checkouts = {"this": None} if args.baseline is None else {"this": None, "baseline": args.baseline.resolve()}
    modes = [("one process", "1")] + ([(f"{args.intakes} intakes", str(args.intakes))] if args.intakes else [])
    results: dict[tuple[str, str, str], list[Count]] = {}
    try:
        for mode, processes in modes:
            for label, checkout in checkouts.items():
                launcher: tuple[str, ...] = (*CALLGRIND, sys.executable, "-m", "ferry")
                if checkout is not None:
                    launcher = ("env", f"PYTHONPATH={checkout / 'server'}", *launcher)
                name = f"{label}, {mode}"
                server = FerryProcess(workdir / "models", launcher, extra=("--intake-processes", processes))
                count_all(binary, server, name, [(m, p) for m in models for p in args.protocols], args, results)
        if args.grpc_floor and "grpc" in args.protocols:
            floor = GrpcFloorProcess(launcher=(*CALLGRIND, sys.executable))  # one process: counted as model_ir
            count_all(binary, floor, FLOOR, [(MODEL, "grpc")], args, results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    publish(report(results, args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
