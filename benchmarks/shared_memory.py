"""Shared memory vs gRPC vs REST binary for a ResNet-50-sized input, at concurrency 1.

A cheap model (global average pool + a 3x1000 matmul: ResNet-50's input and output shapes, little
compute) isolates the cost of moving a [1, 3, 224, 224] FP32 tensor (602 KB) in and 1000 logits out.
Four ways of sending the same request, all with the official tritonclient:

- ``shm/grpc`` and ``shm/rest``: the client writes the input into a registered system shared memory
  region and the server writes the logits into another; the request carries only their names;
- ``grpc``: raw_input_contents; ``rest``: the binary tensor data extension.

The modes take turns window by window (round-robin, several rounds) so drift on this shared machine
hits all of them alike; the table gives the median of each mode's windows. The client's own work
(writing the input, reading the output) is inside each measured request.

With ``--perf-analyzer PATH`` (the binary of the tritonclient==2.41.1 wheel, see
benchmarks/perf_tools.py for its libraries) the same server is also measured with
``perf_analyzer --shared-memory system`` and ``none`` over gRPC and HTTP, in alternating rounds.
perf_analyzer writes its input into shared memory once, so its shm rows show the transfer removed.

    python benchmarks/shared_memory.py [--rounds 5] [--window 2.0] [--perf-analyzer PATH]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import TMP, FerryProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "pool_logits"
SHAPE = (1, 3, 224, 224)
CLASSES = 1000
IN_BYTES = int(np.prod(SHAPE)) * 4
OUT_BYTES = CLASSES * 4
MODES = ("shm/grpc", "shm/rest", "grpc", "rest")
PA_MODES = (("grpc", "system"), ("grpc", "none"), ("http", "system"), ("http", "none"))
_PA_LINE = re.compile(r"Concurrency: 1, throughput: ([\d.]+) infer/sec, latency (\d+) usec")


def build_repo(repo: Path) -> Path:
    """pool_logits: [N,3,224,224] -> GlobalAveragePool -> [N,3] @ W[3,1000] -> logits [N,1000]."""
    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, CLASSES), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("MatMul", ["flat", "w"], ["logits"]),
        ],
        MODEL,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / MODEL / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, repo / MODEL / "1" / "model.onnx")
    (repo / MODEL / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [{ name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }]\n'
        f'output [{{ name: "logits" data_type: TYPE_FP32 dims: [ {CLASSES} ] }}]\n'
        "instance_group [{ kind: KIND_CPU count: 1 }]\n"
    )
    return repo


def callers(server: FerryProcess, image: np.ndarray) -> tuple[dict[str, Callable[[], np.ndarray]], Callable[[], None]]:
    """One request function per mode (each returns the logits), and a cleanup."""
    http = thttp.InferenceServerClient(server.http_url)
    grpc = tgrpc.InferenceServerClient(server.grpc_url)
    in_handle = shm.create_shared_memory_region("bench_in", "/ferry_bench_in", IN_BYTES)
    out_handle = shm.create_shared_memory_region("bench_out", "/ferry_bench_out", OUT_BYTES)
    for client in (http, grpc):
        client.unregister_system_shared_memory()
    grpc.register_system_shared_memory("bench_in", "/ferry_bench_in", IN_BYTES)
    grpc.register_system_shared_memory("bench_out", "/ferry_bench_out", OUT_BYTES)

    def shm_call(client, module) -> Callable[[], np.ndarray]:
        tensor = module.InferInput("input", list(SHAPE), "FP32")
        tensor.set_shared_memory("bench_in", IN_BYTES)
        output = module.InferRequestedOutput("logits")
        output.set_shared_memory("bench_out", OUT_BYTES)

        def call() -> np.ndarray:
            shm.set_shared_memory_region(in_handle, [image])
            client.infer(MODEL, [tensor], outputs=[output])
            return shm.get_contents_as_numpy(out_handle, np.float32, (1, CLASSES))

        return call

    def wire_call(client, module, binary: dict) -> Callable[[], np.ndarray]:
        def call() -> np.ndarray:
            tensor = module.InferInput("input", list(SHAPE), "FP32")
            tensor.set_data_from_numpy(image, **binary)
            output = module.InferRequestedOutput("logits", **binary)
            return client.infer(MODEL, [tensor], outputs=[output]).as_numpy("logits")

        return call

    calls = {
        "shm/grpc": shm_call(grpc, tgrpc),
        "shm/rest": shm_call(http, thttp),
        "grpc": wire_call(grpc, tgrpc, {}),
        "rest": wire_call(http, thttp, {"binary_data": True}),
    }

    def cleanup() -> None:
        grpc.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(in_handle)
        shm.destroy_shared_memory_region(out_handle)
        http.close()
        grpc.close()

    return calls, cleanup


def window(call: Callable[[], np.ndarray], seconds: float) -> tuple[float, float]:
    """Requests/s and median latency (ms) of back-to-back requests for ``seconds``."""
    latencies = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - start)
    return len(latencies) / sum(latencies), statistics.median(latencies) * 1000


def perf_analyzer(
    binary: str, server: FerryProcess, protocol: str, memory: str, window_s: float
) -> tuple[float, float] | None:
    """One perf_analyzer run at concurrency 1: infer/s and average latency (ms); None when it found no
    stable measurement (windows within 100% of each other: this shared machine is noisy)."""
    command = [
        binary,
        *("-m", MODEL, "-u", server.url(protocol), "-i", protocol, "-b", "1", "--concurrency-range", "1"),
        *("--shared-memory", memory, "--output-shared-memory-size", str(OUT_BYTES)),
        *("--measurement-interval", str(int(window_s * 1000)), "-s", "100", "--max-trials", "10"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    found = _PA_LINE.search(done.stdout)
    if done.returncode or not found:
        print(f"perf_analyzer {protocol}/{memory}: no result ({done.returncode}): {done.stdout[-300:]}{done.stderr}")
        return None
    return float(found.group(1)), int(found.group(2)) / 1000


def render_perf_analyzer(results: dict[tuple[str, str], list[tuple[float, float]]], rounds: int) -> str:
    lines = [
        "",
        f"## perf_analyzer (2.41.1), concurrency 1, {rounds} alternating rounds; medians",
        "",
        "| protocol | --shared-memory | infer/s | avg latency ms | runs (infer/s) |",
        "|---|---|---:|---:|---|",
    ]
    for (protocol, memory), runs in results.items():
        if not runs:
            lines.append(f"| {protocol} | {memory} | - | - | no stable run |")
            continue
        rate = statistics.median(r for r, _ in runs)
        latency = statistics.median(lat for _, lat in runs)
        lines.append(
            f"| {protocol} | {memory} | {rate:.0f} | {latency:.2f} | {', '.join(f'{r:.0f}' for r, _ in runs)} |"
        )
    return "\n".join(lines) + "\n"


def render(results: dict[str, list[tuple[float, float]]], rounds: int, seconds: float) -> str:
    base = statistics.median(r for r, _ in results["grpc"])
    lines = [
        f"# System shared memory vs gRPC vs REST binary (input [1,3,224,224] FP32, logits [1,{CLASSES}])",
        "",
        f"Concurrency 1, one tritonclient; {rounds} rounds of {seconds:.1f} s windows, modes in turn; medians.",
        "",
        "| mode | requests/s | median latency ms | vs gRPC | windows (requests/s) |",
        "|---|---:|---:|---:|---|",
    ]
    for mode in MODES:
        rates = [r for r, _ in results[mode]]
        latency = statistics.median(lat for _, lat in results[mode])
        rate = statistics.median(rates)
        lines.append(
            f"| {mode} | {rate:.0f} | {latency:.2f} | {rate / base:.2f}x | {', '.join(f'{r:.0f}' for r in rates)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=2.0, help="seconds per measurement window")
    parser.add_argument("--output", type=Path, default=RESULTS / "shared-memory-cpu.md")
    parser.add_argument("--perf-analyzer", metavar="PATH", help="also measure with this perf_analyzer binary")
    args = parser.parse_args(argv)
    repo = build_repo(TMP / "shm_repo")
    server = FerryProcess(repo, extra=("--allow-shared-memory",))
    try:
        server.wait_ready([MODEL])
        image = np.random.default_rng(1).standard_normal(SHAPE, dtype=np.float32)
        calls, cleanup = callers(server, image)
        try:
            expected = calls["grpc"]()
            for call in calls.values():  # same answer every way, and a warm-up
                np.testing.assert_allclose(call(), expected, rtol=1e-5, atol=1e-5)
                window(call, 0.5)
            results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
            for _ in range(args.rounds):
                for mode in MODES:
                    results[mode].append(window(calls[mode], args.window))
        finally:
            cleanup()
        pa_results: dict[tuple[str, str], list[tuple[float, float]]] = {mode: [] for mode in PA_MODES}
        if args.perf_analyzer:
            for _ in range(args.rounds):
                for protocol, memory in PA_MODES:
                    run = perf_analyzer(args.perf_analyzer, server, protocol, memory, args.window)
                    if run is not None:
                        pa_results[protocol, memory].append(run)
    finally:
        server.stop()
    table = render(results, args.rounds, args.window)
    if args.perf_analyzer:
        table += render_perf_analyzer(pa_results, args.rounds)
    print(table)
    args.output.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
