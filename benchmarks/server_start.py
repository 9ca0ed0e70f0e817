"""A server start: time to ready and CPU seconds by process, one process against intake processes (issue 40).

Starts ``python -m ferry serve REPOSITORY`` on free loopback ports, polls ``/v2/health/ready`` every
10 ms until it answers 200, and then reads from /proc the CPU seconds (user + system) the model
process and each of its intake processes spent getting there. Each start is stopped (SIGTERM, the
seconds to its exit are the last column) before the next. Rounds interleave the modes (and, with
``--baseline CHECKOUT``, the checkouts: each one's ``server/`` and ``clients/python/`` first on
``PYTHONPATH``) and the table gives
medians, so a shared machine's load moves every column alike. Both checkouts are byte-compiled
first, as pip compiles an installed package (``--as-is`` leaves them as they are: with
PYTHONDONTWRITEBYTECODE set and no ``__pycache__``, each interpreter compiles the stack from source).

    python benchmarks/server_start.py --rounds 7
    python benchmarks/server_start.py --baseline /tmp/starts-base --rounds 7
    python benchmarks/server_start.py --repository model_repo --rounds 5
"""

from __future__ import annotations

import argparse
import compileall
import dataclasses
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
HERE = Path(__file__).resolve().parent.parent
POLL_S = 0.01


@dataclass(frozen=True)
class Start:
    """One start: seconds to ready, the model process's CPU seconds, its intakes' (each), and the
    seconds from SIGTERM to the model process's exit."""

    ready_s: float
    model_cpu_s: float
    intake_cpu_s: tuple[float, ...]
    stop_s: float = 0.0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid == pid:
                found.append(int(entry))
    return sorted(found)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _quick_repository(root: Path) -> Path:
    """One tiny ONNX model (identity on FP32 [4]): a start whose cost is the server's, not a model's."""
    import onnx
    from onnx import TensorProto, helper

    model_dir = root / "quick" / "1"
    model_dir.mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "quick",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [None, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(model_dir / "model.onnx"))
    (root / "quick" / "config.pbtxt").write_text(
        'name: "quick"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]\n'
    )
    return root


def _byte_compile(checkout: Path) -> None:
    for package in ("server/ferry", "clients/python/ferry_client"):
        compileall.compile_dir(checkout / package, quiet=1)


def start_once(repository: Path, intakes: int, checkout: Path | None, timeout: float = 120) -> Start:
    """Start, wait for ready, read the CPU seconds, stop."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str((checkout or HERE) / part) for part in ("server", "clients/python"))
    http_port, grpc_port, metrics_port = _free_port(), _free_port(), _free_port()
    command = [sys.executable, "-m", "ferry", "serve", str(repository), "--host", "127.0.0.1"]
    command += ["--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)]
    command += ["--intake-processes", str(intakes)] if intakes else []
    with tempfile.TemporaryFile() as log:
        began = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir())
        try:
            ready_s = _wait_ready(process, http_port, began, timeout)
            children = _children(process.pid)
            start = Start(ready_s, _cpu_seconds(process.pid), tuple(_cpu_seconds(pid) for pid in children))
        except RuntimeError:
            log.seek(0)
            raise RuntimeError(log.read().decode(errors="replace")) from None
        finally:
            stopping = time.perf_counter()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            stop_s = time.perf_counter() - stopping
    if len(start.intake_cpu_s) != intakes:
        raise RuntimeError(f"expected {intakes} intake processes, found {len(start.intake_cpu_s)}")
    return dataclasses.replace(start, stop_s=stop_s)


def _wait_ready(process: subprocess.Popen, http_port: int, began: float, timeout: float) -> float:
    url = f"http://127.0.0.1:{http_port}/v2/health/ready"
    while time.perf_counter() - began < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return time.perf_counter() - began
        except OSError:
            pass
        time.sleep(POLL_S)
    raise RuntimeError(f"not ready in {timeout} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout whose starts interleave with this one's")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--intakes", type=int, default=2, help="intake processes of the intake mode")
    parser.add_argument(
        "--repository", type=Path, help="the repository served (default: one tiny ONNX model, made in a temp dir)"
    )
    parser.add_argument("--as-is", action="store_true", help="do not byte-compile the checkouts first")
    args = parser.parse_args()
    checkouts: dict[str, Path | None] = {"this": None}
    if args.baseline is not None:
        checkouts["baseline"] = args.baseline.resolve()
    modes = {"one process": 0, f"{args.intakes} intakes": args.intakes}
    if not args.as_is:
        for checkout in checkouts.values():
            _byte_compile(checkout or HERE)
    with tempfile.TemporaryDirectory() as temp:
        repository = args.repository.resolve() if args.repository else _quick_repository(Path(temp))
        runs: dict[tuple[str, str], list[Start]] = {(c, m): [] for c in checkouts for m in modes}
        for round_ in range(args.rounds):
            keys = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for checkout, mode in keys:
                start = start_once(repository, modes[mode], checkouts[checkout])
                runs[checkout, mode].append(start)
                intakes = " ".join(f"{s:.2f}" for s in start.intake_cpu_s)
                print(
                    f"round {round_ + 1} {checkout} {mode}: ready {start.ready_s:.2f} s, model process "
                    f"{start.model_cpu_s:.2f} CPU s, intakes [{intakes}], stopped in {start.stop_s:.2f} s",
                    flush=True,
                )
    served = f"{args.repository}" if args.repository else "one tiny ONNX model"
    compiled = "checkouts as they were" if args.as_is else "byte-compiled"
    print(f"\n{served}, {compiled}; medians of {args.rounds}")
    print(
        "| checkout | mode | ready s | model process CPU s | each intake CPU s | all processes CPU s | stop s |"
        "\n|---|---|---:|---:|---:|---:|---:|"
    )
    medians: dict[tuple[str, str], tuple[float, float, float, float, float]] = {}
    for (checkout, mode), starts in runs.items():
        ready = statistics.median(s.ready_s for s in starts)
        model = statistics.median(s.model_cpu_s for s in starts)
        intake = statistics.median(c for s in starts for c in s.intake_cpu_s) if modes[mode] else 0.0
        total = statistics.median(s.model_cpu_s + sum(s.intake_cpu_s) for s in starts)
        stop = statistics.median(s.stop_s for s in starts)
        medians[checkout, mode] = (ready, model, intake, total, stop)
        print(f"| {checkout} | {mode} | {ready:.2f} | {model:.2f} | {intake:.2f} | {total:.2f} | {stop:.2f} |")
    if "baseline" in checkouts:
        for mode in modes:
            this, base = medians["this", mode], medians["baseline", mode]
            ratios = " | ".join(f"{a / b:.2f}x" if b else "-" for a, b in zip(this, base, strict=True))
            print(f"| this / baseline | {mode} | {ratios} |")
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
