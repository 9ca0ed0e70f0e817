"""The host path alone: CPU per request of the model process, the intakes and the client (issue 39).

A no-compute model with ResNet-50's I/O (FP32 ``[3, 224, 224]`` in, ``[1000]`` out: 1000 values
of the image, so the engine copies 4 KB per item and nothing else), ``max_batch_size:
128`` with dynamic batching, built here as an ONNX Runtime model (and as TorchScript when torch is
installed), is served by each server in turn: this checkout in one process and with 2 intake
processes, and with ``--baseline CHECKOUT`` the same two for another checkout (e.g. a
``git worktree add --detach /tmp/main-base main``). perf_analyzer (batch-1 requests, concurrency 64;
``ferry-client perf`` when no perf_analyzer is given or found, which the output says) drives it over
gRPC, REST binary and, with ``--protocols ... grpc-shm``, system shared memory. Rounds interleave
every server (the order rotates), so drift on a shared machine hits all alike.

Per run: req/s (perf_analyzer's), the average batch (statistics API: items inferred / executions)
and CPU microseconds per request (utime + stime from /proc/<pid>/stat, divided by the requests the
server answered during the run) of the model process, of its intake processes and of the client
(getrusage of the finished client process). Medians over rounds; with a baseline, ratios this / it.
With ``--pytriton PYTHON`` (an interpreter with ``nvidia-pytriton`` installed) PyTriton serves the
ONNX model's twin (``pytriton_host_path.py``) in the same rounds, and each of this checkout's servers
is compared with it by req/s and by the CPU of all of a server's processes per request. PyTriton's
Python backend stub loads ``libpython3.X.so`` from the library path: where the system's is older
than the interpreter's (a pyenv Python), put the interpreter's ``lib`` first in ``LD_LIBRARY_PATH``.
``--tiny`` also serves model_repo's tiny ``simple`` (dynamically batched, on both sides);
``--grpc-floor`` also serves the gRPC rows with grpcio alone (``grpc_floor.py``), what a gRPC intake
costs at the least.

    git worktree add --detach /tmp/main-base main
    LD_LIBRARY_PATH=... python benchmarks/host_path.py --perf-analyzer /tmp/pa/venv/bin/perf_analyzer \\
        --baseline /tmp/main-base --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from serving import ROOT, FerryProcess, cpu_seconds, free_port, publish

from ferry_client.protocol import grpc_service_pb2 as pb

MODEL = "host_path"
CONFIG = """name: "{name}"
{platform}
max_batch_size: 128
input [ {{ name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "output" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
dynamic_batching {{ }}
"""
PROTOCOLS = ("grpc", "http", "grpc-shm")
PYTRITON = "PyTriton"
FLOOR = "grpcio floor"
#: The tiny model (``--tiny``): model_repo's Triton-style ``simple``, INT32 [16] + and -, batched
#: dynamically here.
TINY = "simple"
SHM_OUTPUT_BYTES = 4000


def build_onnx(directory: Path) -> None:
    """The no-compute model: 1000 values of each image (a slice of 4 KB, then a reshape: a Flatten
    of the whole input would copy it, 0.6 MB a request, and that is compute)."""
    tensors = {
        "starts": [0, 0, 0],
        "ends": [1, 5, 200],
        "axes": [1, 2, 3],
        "shape": [-1, 1000],
    }
    constants = [numpy_helper.from_array(np.array(v, dtype=np.int64), k) for k, v in tensors.items()]
    graph = helper.make_graph(
        [
            helper.make_node("Slice", ["input", "starts", "ends", "axes"], ["corner"]),
            helper.make_node("Reshape", ["corner", "shape"], ["output"]),
        ],
        "host_path",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 1000])],
        constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ferry-benchmarks")
    (directory / "1").mkdir(parents=True)
    onnx.save(model, str(directory / "1" / "model.onnx"))
    (directory / "config.pbtxt").write_text(CONFIG.format(name=directory.name, platform='platform: "onnxruntime_onnx"'))


def build_torchscript(directory: Path) -> bool:
    """The same model as TorchScript; False when torch is not installed."""
    try:
        import torch
    except ImportError:
        return False

    class FirstValues(torch.nn.Module):
        def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (the config's input name)
            return input[:, :1, :5, :200].reshape(-1, 1000).clone()

    (directory / "1").mkdir(parents=True)
    torch.jit.save(torch.jit.script(FirstValues()), str(directory / "1" / "model.pt"))
    (directory / "config.pbtxt").write_text(CONFIG.format(name=directory.name, platform='backend: "pytorch"'))
    return True


class PyTritonProcess(FerryProcess):
    """PyTriton serving the same model (``pytriton_host_path.py``) under ``python``, an interpreter
    with ``nvidia-pytriton`` installed: Triton's C++ front end and batcher, the model in Python."""

    def __init__(self, python: str) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        script = Path(__file__).with_name("pytriton_host_path.py")
        ports = (self.grpc_port, self.http_port, self.metrics_port)
        self.start([python, str(script), *(str(port) for port in ports)], "pytriton.log")


class GrpcFloorProcess(FerryProcess):
    """grpcio alone, configured as Ferry's, answering ModelInfer with a fixed answer after the one
    copy no intake can skip (``grpc_floor.py``): what a gRPC intake costs at the least."""

    def __init__(self, launcher: Sequence[str] = (sys.executable,)) -> None:
        self.grpc_port = free_port()
        self.start([*launcher, str(Path(__file__).with_name("grpc_floor.py")), str(self.grpc_port)], "floor.log")
        self._channel = grpc.insecure_channel(self.grpc_url)
        self._statistics = self._channel.unary_unary(
            "/inference.GRPCInferenceService/ModelStatistics",
            request_serializer=pb.ModelStatisticsRequest.SerializeToString,
            response_deserializer=pb.ModelStatisticsResponse.FromString,
        )

    def url(self, protocol: str) -> str:
        return self.grpc_url

    def wait_ready(self, models_: Sequence[str], timeout: float = 60.0) -> None:
        grpc.channel_ready_future(self._channel).result(timeout=timeout)

    def stats(self, model: str) -> dict[str, Any]:
        stats = self._statistics(pb.ModelStatisticsRequest(name=model), timeout=10).model_stats[0]
        return {
            "inference_stats": {"success": {"count": stats.inference_stats.success.count}},
            "inference_count": stats.inference_count,
            "execution_count": stats.execution_count,
        }

    def stop(self) -> None:
        self._channel.close()
        super().stop()


def build_repository(directory: Path, tiny: bool) -> list[str]:
    build_onnx(directory / MODEL)
    models = [MODEL]
    if build_torchscript(directory / f"{MODEL}_torch"):
        models.append(f"{MODEL}_torch")
    if tiny:  # with dynamic batching, as PyTriton's twin has (pytriton_host_path.py)
        shutil.copytree(ROOT / "model_repo" / TINY, directory / TINY)
        with (directory / TINY / "config.pbtxt").open("a") as config:
            config.write("dynamic_batching { }\n")
        models.append(TINY)
    return models


# --- measuring ----------------------------------------------------------------------------------


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Runs:
    """Every run of one (server, model, protocol)."""

    rps: list[float] = field(default_factory=list)
    batch: list[float] = field(default_factory=list)
    model_us: list[float] = field(default_factory=list)
    intake_us: list[float] = field(default_factory=list)
    server_us: list[float] = field(default_factory=list)
    client_us: list[float] = field(default_factory=list)


def counts(server: FerryProcess, model: str) -> tuple[int, int, int]:
    """Requests answered, items inferred and executions of ``model`` so far."""
    stats = server.stats(model)
    return (
        int(stats["inference_stats"]["success"]["count"]),
        int(stats["inference_count"]),
        int(stats["execution_count"]),
    )


def perf_analyzer_command(binary: str, server: FerryProcess, model: str, protocol: str, args: argparse.Namespace):
    wire = "grpc" if protocol.startswith("grpc") else "http"
    shm = ["--shared-memory", "system", "--output-shared-memory-size", str(SHM_OUTPUT_BYTES)]
    return [
        binary,
        *("-m", model, "-u", server.url(wire), "-i", wire, "-b", "1"),
        *("--concurrency-range", f"{args.concurrency}:{args.concurrency}"),
        *("--measurement-interval", str(args.window_ms), "--stability-percentage", "100", "--max-trials", "10"),
        *(shm if protocol == "grpc-shm" else []),
    ]


def ferry_perf_command(server: FerryProcess, model: str, protocol: str, args: argparse.Namespace):
    wire = "grpc" if protocol.startswith("grpc") else "http"
    return [
        sys.executable,
        *("-m", "ferry_client.cli", "perf", "-m", model, "-u", server.url(wire), "-i", wire, "-b", "1"),
        *("--concurrency-range", f"{args.concurrency}:{args.concurrency}"),
        *("--measurement-interval", str(args.window_ms), "--stability-percentage", "100", "--max-trials", "4"),
        *("--json", str(args.workdir / "perf.json"), "-q"),
    ]


def measure(server: FerryProcess, model: str, protocol: str, args: argparse.Namespace, runs: Runs) -> None:
    command = (
        perf_analyzer_command(args.perf_analyzer, server, model, protocol, args)
        if args.perf_analyzer
        else ferry_perf_command(server, model, protocol, args)
    )
    (own0, below0), (req0, items0, execs0), client0 = cpu_seconds(server.pid), counts(server, model), _children_cpu()
    for _ in range(3):  # perf_analyzer gives no figure when its windows differ too much: try again
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if result.returncode == 0:
            break
    client1 = _children_cpu()
    (own1, below1), (req1, items1, execs1) = cpu_seconds(server.pid), counts(server, model)
    out = result.stdout + result.stderr
    found: list[float] = []
    if args.perf_analyzer:  # "Concurrency: 64, throughput: 812.4 infer/sec, latency ..."
        found = [float(line.split("throughput:")[1].split()[0]) for line in out.splitlines() if "throughput:" in line]
    elif result.returncode == 0:
        found = [json.loads((args.workdir / "perf.json").read_text())["steps"][0]["throughput"]]
    if result.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(command)} failed:\n{out[-3000:]}")
    runs.rps.append(found[-1])
    requests = max(1, req1 - req0)
    runs.batch.append((items1 - items0) / max(1, execs1 - execs0))
    runs.model_us.append((own1 - own0) / requests * 1e6)
    runs.intake_us.append((below1 - below0) / requests * 1e6)
    runs.server_us.append(runs.model_us[-1] + runs.intake_us[-1])
    runs.client_us.append((client1 - client0) / requests * 1e6)


def find_perf_analyzer(given: str | None) -> str | None:
    return given or shutil.which("perf_analyzer")


# --- report -------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ratio(this: float, base: float) -> str:
    return f"{this / base:.2f}x" if base else "-"


def report(results: dict[tuple[str, str, str], Runs], args: argparse.Namespace, client: str) -> str:
    lines = [
        f"# Host path: a no-compute model with ResNet-50's I/O ({os.cpu_count()} cores, {client})",
        "",
        f"`python benchmarks/host_path.py {' '.join(args.argv)}`",
        "",
        f"{args.rounds} interleaved rounds, medians; batch-1 requests at concurrency {args.concurrency}, "
        f"{args.window_ms} ms windows. CPU us per request from /proc (model process, intake processes) and "
        "getrusage (client), over the requests the server answered during each run.",
        "",
        "| model | protocol | server | req/s | avg batch | model us/req | intakes us/req | server us/req "
        "| client us/req | runs (req/s) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for (server, model, protocol), runs in results.items():
        lines.append(
            f"| {model} | {protocol} | {server} | {_median(runs.rps):.0f} | {_median(runs.batch):.1f} | "
            f"{_median(runs.model_us):.0f} | {_median(runs.intake_us):.0f} | {_median(runs.server_us):.0f} | "
            f"{_median(runs.client_us):.0f} | "
            f"{', '.join(f'{v:.0f}' for v in runs.rps)} |"
        )
    if args.baseline is not None:
        lines += [
            "",
            "## This checkout / baseline (medians of the interleaved rounds)",
            "",
            "| model | protocol | mode | req/s | model CPU/req | intakes CPU/req |",
            "|---|---|---|---:|---:|---:|",
        ]
        for (server, model, protocol), runs in results.items():
            if not server.startswith("this"):
                continue
            mode = server.removeprefix("this, ")
            base = results[(f"baseline, {mode}", model, protocol)]
            intakes = _ratio(_median(runs.intake_us), _median(base.intake_us)) if "intake" in mode else "-"
            lines.append(
                f"| {model} | {protocol} | {mode} | {_ratio(_median(runs.rps), _median(base.rps))} | "
                f"{_ratio(_median(runs.model_us), _median(base.model_us))} | {intakes} |"
            )
    if args.pytriton is not None:
        lines += _against_pytriton(results)
    return "\n".join(lines) + "\n"


def _against_pytriton(results: dict[tuple[str, str, str], Runs]) -> list[str]:
    """Each of this checkout's servers of an ONNX model against PyTriton's, protocol by protocol."""
    lines = [
        "",
        f"## This checkout / {PYTRITON} (medians; server CPU: every process of the server)",
        "",
        "| model | protocol | mode | req/s | server CPU/req |",
        "|---|---|---|---:|---:|",
    ]
    for (server, model, protocol), runs in results.items():
        peer = results.get((PYTRITON, model, protocol))
        if server.startswith("this") and peer is not None:
            mode = server.removeprefix("this, ")
            rps, cpu = (
                _ratio(_median(runs.rps), _median(peer.rps)),
                _ratio(_median(runs.server_us), _median(peer.server_us)),
            )
            lines.append(f"| {model} | {protocol} | {mode} | {rps} | {cpu} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", help="its path (default: perf_analyzer on PATH, else ferry-client perf)")
    parser.add_argument("--baseline", type=Path, help="another checkout to run interleaved (e.g. a worktree of main)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--window-ms", type=int, default=1500)
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=["grpc", "http"])
    parser.add_argument("--intakes", type=int, default=2, help="intake processes of the second server of each checkout")
    parser.add_argument("--modes", nargs="+", choices=("one", "intakes"), default=["one", "intakes"])
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument(
        "--grpc-floor", action="store_true", help="also serve the gRPC rows with grpcio alone (grpc_floor.py)"
    )
    parser.add_argument("--tiny", action="store_true", help=f"also serve model_repo's tiny '{TINY}' model")
    parser.add_argument(
        "--pytriton", metavar="PYTHON", help="also serve the ONNX model's twin with PyTriton under this interpreter"
    )
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    args.perf_analyzer = find_perf_analyzer(args.perf_analyzer)
    client = "perf_analyzer" if args.perf_analyzer else "ferry-client perf (no perf_analyzer found)"
    print(f"client: {client}", flush=True)
    workdir = args.workdir = Path(tempfile.mkdtemp(prefix="ferry-host-path-"))
    models = build_repository(workdir / "models", args.tiny)
    extra_shm = ("--allow-shared-memory",) if "grpc-shm" in args.protocols else ()
    checkouts = {"this": None} if args.baseline is None else {"this": None, "baseline": args.baseline.resolve()}
    servers: dict[str, FerryProcess] = {}
    for label, checkout in checkouts.items():
        launcher: tuple[str, ...] = (sys.executable, "-m", "ferry")
        if checkout is not None:
            launcher = ("env", f"PYTHONPATH={checkout / 'server'}", *launcher)
        for mode in args.modes:
            count = "1" if mode == "one" else str(args.intakes)
            name = f"{label}, one process" if mode == "one" else f"{label}, {count} intakes"
            servers[name] = FerryProcess(workdir / "models", launcher, extra=("--intake-processes", count, *extra_shm))
    served = dict.fromkeys(servers, models)
    if args.pytriton is not None:
        servers[PYTRITON], served[PYTRITON] = PyTritonProcess(args.pytriton), [MODEL, *([TINY] if args.tiny else [])]
    if args.grpc_floor and "grpc" in args.protocols:
        servers[FLOOR], served[FLOOR] = GrpcFloorProcess(), [MODEL]
    results: dict[tuple[str, str, str], Runs] = {}
    try:
        for name, server in servers.items():
            server.wait_ready(served[name])
        names = list(servers)
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                for model in served[name]:
                    for protocol in args.protocols if name != FLOOR else ["grpc"]:
                        runs = results.setdefault((name, model, protocol), Runs())
                        measure(servers[name], model, protocol, args, runs)
                        print(
                            f"round {round_ + 1} {name} {model} {protocol}: {runs.rps[-1]:.0f} req/s, batch "
                            f"{runs.batch[-1]:.1f}, CPU us/req model {runs.model_us[-1]:.0f} intakes "
                            f"{runs.intake_us[-1]:.0f} client {runs.client_us[-1]:.0f}",
                            flush=True,
                        )
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    ordered = {key: results[key] for key in sorted(results, key=lambda k: (k[1], k[2], k[0]))}
    publish(report(ordered, args, client), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
