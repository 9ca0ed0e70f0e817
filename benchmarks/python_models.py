"""What does a Python model cost per request? A trivial Python identity against the same identity
as an ONNX model, in one server, in one run.

Run ``python benchmarks/python_models.py [--quick] [--windows N] [--window S] [--output FILE]``.

The repository holds three models with the same config (FP32 [N, 16], max_batch_size 16, dynamic
batching): ``onnx_identity`` (ONNX Runtime), ``python_identity`` (``model.py`` in the server's
process) and ``python_identity_isolated`` (the same ``model.py`` in a child process). The server
is started with Python models allowed. For each protocol and concurrency the three models are
measured back to back (closed loop, clients in spawned processes, see serving.py), each as a
warm-up and several windows whose median is reported. "added" is the Python model's median
latency minus the ONNX model's in the same step; "infer/exec" is the server's own compute time per
execution from its statistics, which excludes the network and the client. Concurrency 1 is also
measured paired (rounds of sequential calls to each model in turn), which holds up on a busy
machine where closed-loop windows swing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving  # noqa: E402  (benchmarks/ is not a package)

WIDTH = 16
MODELS = ("onnx_identity", "python_identity", "python_identity_isolated")
CONFIG = """{backend}max_batch_size: 16
dynamic_batching {{}}
input [ {{ name: "input" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "output" data_type: TYPE_FP32 dims: [ {width} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}"""
MODEL_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            array = pb_utils.get_input_tensor_by_name(request, "input").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("output", array)]))
        return responses
"""


def build_repository(repo: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["input"], ["output"])],
        "identity",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", WIDTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", WIDTH])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    for name in MODELS:
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(repo / "onnx_identity" / "1" / "model.onnx"))
    (repo / "onnx_identity" / "config.pbtxt").write_text(
        CONFIG.format(backend='platform: "onnxruntime_onnx"\n', width=WIDTH, extra="")
    )
    isolated = 'parameters { key: "FERRY_ISOLATION" value { string_value: "process" } }\n'
    for name, extra in (("python_identity", ""), ("python_identity_isolated", isolated)):
        (repo / name / "1" / "model.py").write_text(MODEL_PY)
        (repo / name / "config.pbtxt").write_text(
            CONFIG.format(backend='backend: "python"\n', width=WIDTH, extra=extra)
        )
    return repo


def paired_latency(server: serving.FerryProcess, protocol: str, data: np.ndarray, blocks: int, size: int) -> dict:
    """Sequential calls (c=1) in blocks of ``size`` per model, the models in turn (rotating order):
    each model's median latency, and the median over blocks of its block median minus the ONNX
    model's block median in the same round, which cancels the drift of a shared machine."""
    callers, closers = {}, []
    for model in MODELS:
        call, close = serving.make_caller(
            serving.Target(protocol, server.url(protocol), model, "input", "output", data)
        )
        callers[model] = call
        closers.append(close)
    medians: dict[str, list[float]] = {model: [] for model in MODELS}
    samples: dict[str, list[int]] = {model: [] for model in MODELS}
    try:
        for model, call in callers.items():
            if not np.array_equal(call(), data):
                raise RuntimeError(f"{model} did not return its input")
            for _ in range(20):
                call()
        for index in range(blocks):
            shift = index % len(MODELS)
            for model in MODELS[shift:] + MODELS[:shift]:
                call = callers[model]
                call()
                block = []
                for _ in range(size):
                    start = serving.now_ns()
                    call()
                    block.append(serving.now_ns() - start)
                samples[model].extend(block)
                medians[model].append(float(np.median(block)))
    finally:
        for close in closers:
            close()
    base = np.asarray(medians["onnx_identity"])
    return {
        model: {
            "p50_ms": serving.percentile_ms(samples[model], 50),
            "paired_added_ms": float(np.median(np.asarray(medians[model]) - base)) / 1e6,
        }
        for model in MODELS
    }


def infer_us_per_execution(result: dict[str, Any]) -> float:
    """The server's compute time per execution in the median window (no network, no client)."""
    window = min(result["windows"], key=lambda w: abs(w["throughput"] - result["throughput"]))
    return window["compute_infer_ns"] / 1e3 / window["execution_count"] if window["execution_count"] else float("nan")


def render(paired: dict[str, dict], rows: list[dict[str, Any]], machine: dict[str, Any], blocks: int, size: int) -> str:
    lines = [
        "# Python models: per-request overhead against ONNX Runtime (identity, FP32 [1, 16])",
        "",
        f"{machine.get('cpu_count')} CPUs ({machine.get('cpu_model', '')}), Python {machine.get('python')}, "
        f"onnxruntime {machine.get('onnxruntime')}, commit {machine.get('commit', '')}.",
        "",
        f"Concurrency 1, paired: {blocks} rounds of {size} sequential calls per model, models in turn; "
        "added = median over rounds of (model's round median - ONNX model's round median).",
        "",
        "| protocol | model | p50 ms | added ms (paired) |",
        "|---|---|---:|---:|",
    ]
    for protocol, results in paired.items():
        for model, result in results.items():
            added = "" if model == "onnx_identity" else f"{result['paired_added_ms']:+.3f}"
            lines.append(f"| {protocol} | {model} | {result['p50_ms']:.3f} | {added} |")
    lines += [
        "",
        "Closed-loop load, median of the measurement windows; added = p50 minus the ONNX model's p50 in",
        "the same protocol and concurrency; infer/exec = the server's compute time per execution.",
        "",
        "| protocol | c | model | req/s | p50 ms | added p50 ms | infer/exec us | avg batch | other CPU |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        added = "" if row["model"] == "onnx_identity" else f"{row['added_p50_ms']:+.3f}"
        lines.append(
            f"| {row['protocol']} | {row['concurrency']} | {row['model']} | {row['throughput']:.0f} | "
            f"{row['p50_ms']:.3f} | {added} | {row['infer_us']:.1f} | {row['avg_batch']:.2f} | {row['other_cpu']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short windows (a smoke run)")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--window", type=float, default=3.0, help="seconds per measurement window")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--protocols", nargs="+", default=["grpc", "rest"], choices=serving.PROTOCOLS)
    parser.add_argument("--rounds", type=int, default=60, help="rounds of the paired concurrency-1 measurement")
    parser.add_argument("--output", type=Path, default=serving.RESULTS / "python-models-cpu.md")
    args = parser.parse_args(argv)
    window, windows = (1.0, 3) if args.quick else (args.window, args.windows)
    repo = build_repository(serving.TMP / "python_models_repo")
    os.environ["FERRY_ALLOW_PYTHON_MODELS"] = "1"  # the server subprocess inherits it
    data = np.random.default_rng(0).random((1, WIDTH), dtype=np.float32)
    server = serving.FerryProcess(repo)
    pool = serving.WorkerPool(min(max(args.concurrency), 4))
    meter = serving.CpuMeter(lambda: [server.pid, *(p.pid for p in pool.processes)])
    rows: list[dict[str, Any]] = []
    paired: dict[str, dict] = {}
    rounds, size = (10, 20) if args.quick else (args.rounds, 20)
    try:
        server.wait_ready(MODELS)
        for protocol in args.protocols:
            paired[protocol] = paired_latency(server, protocol, data, rounds, size)
            print(f"  paired c=1 {protocol}: {paired[protocol]}", flush=True)
        for protocol in args.protocols:
            for concurrency in args.concurrency:
                baseline = None
                for model in MODELS:
                    step = serving.LoadStep(
                        f"{model} {protocol} c={concurrency}",
                        protocol,
                        model,
                        "input",
                        "output",
                        data,
                        concurrency,
                        min(concurrency, len(pool.processes)),
                        max(1.0, window / 2),
                        window,
                        windows,
                    )
                    result = serving.run_load(pool, server, step, None, meter)
                    result["infer_us"] = infer_us_per_execution(result)
                    baseline = baseline or result
                    result["added_p50_ms"] = result["p50_ms"] - baseline["p50_ms"]
                    rows.append(result)
    finally:
        pool.close()
        server.stop()
    machine = serving.machine_info()
    text = render(paired, rows, machine, rounds, size)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    args.output.with_suffix(".json").write_text(
        json.dumps({"machine": machine, "paired": paired, "rows": rows}, indent=1, default=str)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
