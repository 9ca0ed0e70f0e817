"""GPU benchmark: raw in-process torch FP16 ResNet-50 against the same model served by Ferry's PyTorch
backend (dynamic batching onto the GPU), over gRPC, REST binary and the image path.

On a machine with an NVIDIA GPU, from a Ferry checkout, in one command (about 10 minutes; torch
with CUDA, e.g. the cu130 wheel, and the GPU tests first)::

    pip install -e ./clients/python -e ".[test,torch]" && python -m pytest -q -m gpu tests/unit tests/integration \
        && python benchmarks/gpu_torch.py --check && python benchmarks/gpu_torch.py

Options: ``[--duration S] [--windows N] [--instances 1 2 3 4] [--output FILE]``. The results go to
``benchmarks/results/gpu-torch.md`` and ``.json`` (commit them).

``--check`` runs what a CPU can check before GPU time is spent (seconds, no server): the arguments,
the scripted ResNet-50, the repositories each step would serve (their configs parsed by Ferry, the
CUDA-graph buckets they capture), and the tensor model loaded by Ferry on this machine's device
answering one batch. ``--smoke`` shrinks every setting so that the whole script also runs on a CPU
(with CPU torch); those figures only show that the script works and are labelled CPU-only.

Steps, in order:

1. raw torch throughput per batch size and precision (``--precisions``: FP16 half weights and FP32 on
   a GPU), the input resident on the device: eager, and CUDA-graph replay (GPU);
2. for each instance count (``count`` KIND_GPU instances on GPU 0): a server in a subprocess with
   CUDA graphs and FP16; closed-loop batch-1 requests over gRPC and REST (binary) at each
   concurrency from several client processes; the image path (640x480 JPEG as a BYTES input over
   gRPC, decoded on the GPU by torchvision's batched nvJPEG (``--decode CPU``: by Pillow on the CPU),
   resized and normalised on the GPU) at the top concurrency; then gRPC
   paced at half of that instance count's best throughput, for latency at half load. NVML metrics
   (``nv_gpu_*``) are scraped from the server's /metrics during the top-concurrency gRPC step;
2b. every further precision (FP32) served the same way with the fewest instances, top concurrency only;
2c. intake scaling (``--intakes``): the most instances, first precision, with ``--intake-processes K``
   for each K (1: one process, no hand-off; the other steps run the server's default, one intake per
   four cores): the image path and gRPC tensors at the top concurrency (K intakes decode JPEGs in
   parallel; one process decodes them all in its worker pool); then, when perf_analyzer is found
   (``--perf-analyzer PATH``, else on PATH), gRPC tensors from perf_analyzer (a C++ client) with
   the CPU per request of the model process, the intakes and the client;
3. a markdown table and a JSON file of every number, in ``benchmarks/results/``.

Clients are tritonclient threads in spawned worker processes (benchmarks/serving.py's machinery).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import shutil
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import host_path  # noqa: E402  (benchmarks/ is not a package)
import images  # noqa: E402
import models  # noqa: E402
import serving  # noqa: E402
import torch_models  # noqa: E402

RESULTS = serving.RESULTS
WORK = serving.TMP / "gpu_torch"
GPU_METRICS = ("nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes", "nv_gpu_power_usage")


# --- raw torch ---------------------------------------------------------------------------------


def raw_benchmark(
    model_file: Path, device: torch.device, fp16: bool, batches: Sequence[int], window_s: float, windows: int
) -> list[dict[str, Any]]:
    """Images/s per batch size and mode (eager; CUDA graph on a GPU), median of ``windows`` windows."""
    module = torch.jit.load(str(model_file), map_location=device).eval()
    if fp16:
        module = module.half()
    cuda = device.type == "cuda"
    sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
    rows = []
    with torch.inference_mode():
        for batch in batches:
            x = torch.from_numpy(np.repeat(models.sample_image(), batch, axis=0)).to(device)
            x = x.half() if fp16 else x
            runners: dict[str, Callable[[], Any]] = {"eager": lambda x=x: module(x)}
            if cuda:
                runners["graph"] = _graphed(module, x)
            row: dict[str, Any] = {"batch": batch}
            for mode, run in runners.items():
                for _ in range(3):
                    run()
                sync()
                results = [_raw_window(run, sync, batch, window_s) for _ in range(windows)]
                median = sorted(results, key=lambda r: r["throughput"])[(len(results) - 1) // 2]
                latencies = [v for r in results for v in r["latency_ns"]]
                row[mode] = {
                    "throughput": median["throughput"],
                    "windows": [r["throughput"] for r in results],
                    "p50_ms": serving.percentile_ms(latencies, 50),
                    "p99_ms": serving.percentile_ms(latencies, 99),
                }
            best = max((mode for mode in runners), key=lambda m: row[m]["throughput"])
            row.update(
                best_mode=best,
                throughput=row[best]["throughput"],
                latency_p50_ms=row[best]["p50_ms"],
                latency_p99_ms=row[best]["p99_ms"],
            )
            rows.append(row)
            print(
                f"  raw batch {batch:3d}: "
                + "  ".join(f"{m} {row[m]['throughput']:8.1f} img/s (p50 {row[m]['p50_ms']:.2f} ms)" for m in runners),
                flush=True,
            )
    return rows


def _graphed(module: torch.nn.Module, x: torch.Tensor) -> Callable[[], Any]:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            module(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        module(x)
    return graph.replay


def _raw_window(run: Callable[[], Any], sync: Callable[[], None], batch: int, window_s: float) -> dict[str, Any]:
    latencies = []
    t0 = serving.now_ns()
    while True:
        start = serving.now_ns()
        run()
        sync()
        latencies.append(serving.now_ns() - start)
        if serving.now_ns() - t0 >= window_s * 1e9 and len(latencies) >= 3:
            break
    return {"throughput": batch * len(latencies) / ((serving.now_ns() - t0) / 1e9), "latency_ns": latencies}


# --- the server ----------------------------------------------------------------------------------


def perf_analyzer_row(
    server: serving.FerryProcess,
    args: argparse.Namespace,
    raw: list[dict[str, Any]],
    instances: int,
    precision: str,
    intakes: int,
) -> dict[str, Any]:
    """gRPC batch-1 tensors from perf_analyzer at the top concurrency: a C++ client, so the client is
    not what bounds the figure, with CPU per request of the model process, the intakes and the
    client (``host_path.measure``)."""
    settings = argparse.Namespace(
        perf_analyzer=args.perf_analyzer,
        concurrency=max(args.concurrency),
        window_ms=round(args.duration * 1000),
        workdir=WORK,
    )
    runs = host_path.Runs()
    host_path.measure(server, "resnet50", "grpc", settings, runs)
    best = max(r["throughput"] for r in raw)
    row = {"instances": instances, "precision": precision, "intakes": intakes, "concurrency": settings.concurrency}
    row.update(throughput=runs.rps[0], vs_raw_best=runs.rps[0] / best, avg_batch=runs.batch[0])
    row.update(model_us=runs.model_us[0], intake_us=runs.intake_us[0], client_us=runs.client_us[0])
    print(f"  perf_analyzer, {intakes} intake(s): {row['throughput']:.1f} img/s = {row['vs_raw_best']:.3f} x raw")
    return row


def scrape_gpu_metrics(server: serving.FerryProcess) -> dict[str, float]:
    """The nv_gpu_* samples of GPU 0 on /metrics (empty without NVML)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {}
    for name in GPU_METRICS:
        match = re.search(rf'^{name}{{gpu="0"}} (\S+)$', text, re.M)
        if match:
            values[name] = float(match.group(1))
    return values


def served_steps(
    pool: serving.WorkerPool,
    server: serving.FerryProcess,
    args: argparse.Namespace,
    raw: list[dict[str, Any]],
    meter: serving.CpuMeter,
    instances: int,
    jpeg: bytes,
    precision: str,
    concurrencies: Sequence[int] | None = None,
    protocols: Sequence[str] = ("grpc", "rest"),
    half_load: bool = True,
    label_suffix: str = "",
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, dict[str, float]]:
    image = models.sample_image()
    top = max(args.concurrency)
    concurrencies = list(concurrencies or args.concurrency)
    rows = []
    gpu_metrics: dict[str, float] = {}

    def step(
        label: str,
        protocol: str,
        model: str,
        data: np.ndarray,
        concurrency: int,
        rate: float = 0.0,
        scrape: bool = False,
    ) -> dict[str, Any]:
        processes = max(1, min(args.processes, concurrency))
        load = serving.LoadStep(
            f"{instances}x {precision}{label_suffix} {label} c={concurrency}",
            protocol,
            model,
            "input",
            "logits",
            data,
            concurrency,
            processes,
            args.warmup,
            args.duration,
            args.windows,
            rate,
        )
        timer = None
        if scrape:  # NVML values while the GPU is busiest: half-way through the measurement

            def take() -> None:
                with contextlib.suppress(OSError):
                    gpu_metrics.update(scrape_gpu_metrics(server))

            timer = threading.Timer(0.2 + args.warmup + args.duration * args.windows / 2, take)
            timer.start()
        result = serving.run_load(pool, server, load, raw, meter)
        if timer is not None:
            timer.join()
        result.update(instances=instances, path=label, precision=precision)
        return result

    for concurrency in concurrencies:
        for protocol in protocols:
            rows.append(
                step(
                    serving.PROTOCOL_NAMES[protocol],
                    protocol,
                    "resnet50",
                    image,
                    concurrency,
                    scrape=protocol == "grpc" and concurrency == top,
                )
            )
    rows.append(step("image path (gRPC, JPEG)", "grpc", "resnet50_images", np.array([jpeg], dtype=object), top))
    if not half_load:
        return rows, None, gpu_metrics
    best = max((r for r in rows if r["protocol"] == "grpc" and r["model"] == "resnet50"), key=lambda r: r["throughput"])
    half_rate = best["throughput"] / 2
    half = step("gRPC at half load", "grpc", "resnet50", image, min(64, top), rate=half_rate)
    half["target_rate"] = half_rate
    return rows, half, gpu_metrics


# --- report --------------------------------------------------------------------------------------


def machine(device: torch.device) -> dict[str, Any]:
    info = serving.machine_info()
    info["torch"] = torch.__version__
    info["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (no CUDA device)"
    info["cuda"] = torch.version.cuda or "-"
    return info


def render(report: dict[str, Any]) -> str:
    info, settings = report["machine"], report["settings"]
    first = settings["precision"]
    raw_first = [r for r in report["raw"] if r.get("precision", first) == first]
    best = max(raw_first, key=lambda r: r["throughput"])
    served_first = [r for r in report["served"] if r["model"] == "resnet50" and r.get("precision", first) == first]
    served_best = max(served_first, key=lambda r: r["throughput"])
    precisions = "/".join(p.upper() for p in settings.get("precisions", [first]))
    title = (
        f"# Ferry PyTorch backend on a GPU: ResNet-50 {precisions}"
        if report["gpu"]
        else "# Ferry PyTorch backend benchmark: CPU-only smoke run (NOT GPU figures)"
    )
    other_cpu = report["raw_other_cpu"]
    other_text = ", ".join(f"{k} {v:.0%}" for k, v in other_cpu.items()) if isinstance(other_cpu, dict) else ""
    lines = [
        title,
        "",
        f"- command: `{report['command']}` ({report['elapsed_s']:.0f} s); date (UTC) {report['date']}; "
        f"commit {info['commit'] or '?'}",
        f"- device: {info['device']}; torch {info['torch']} (CUDA {info['cuda']}); {info['cpu_count']} CPUs "
        f"({info['cpu_model']}); Python {info['python']}; tritonclient {info['tritonclient']}",
        f"- model: ResNet-50 topology with random weights in plain torch (benchmarks/torch_models.py), TorchScript; "
        f"input FP32 1x3x224x224 per request; server: `ferry_precision` as the precision column, CUDA graphs "
        f"{'on' if settings['graphs'] else 'off'}, max_batch_size {settings['max_batch_size']}, "
        f"`dynamic_batching {{ }}`, {settings['kind']} instances, image pre-processing on the "
        f"{'GPU' if report['gpu'] else 'CPU'}",
        f"- raw: in-process, input already on the device, one synchronisation per run; eager and CUDA-graph "
        f"replay; best raw {first}: {best['throughput']:.1f} img/s at batch {best['batch']} ({best['best_mode']}); "
        f"other processes used {other_text} of the CPUs meanwhile",
        f"- served: closed-loop batch-1 requests from up to {settings['processes']} spawned client processes "
        f"(tritonclient threads); {settings['warmup_s']:g} s warm-up, {settings['windows']} windows of "
        f"{settings['window_s']:g} s, median window; avg batch and busy from the statistics API; 'vs raw best' "
        "against the same precision's best raw figure; other CPU: share of the machine's CPU used by processes "
        "outside the benchmark during the step (rows with more than a few percent were disturbed)",
        "",
        "## Raw torch",
        "",
        "| precision | batch | eager img/s | eager p50 ms | graph img/s | graph p50 ms | graph p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    fmt = serving._fmt
    for r in report["raw"]:
        graph = r.get("graph", {})
        lines.append(
            f"| {r.get('precision', first)} | {r['batch']} | {fmt(r['eager']['throughput'])} | "
            f"{fmt(r['eager']['p50_ms'], 2)} | {fmt(graph.get('throughput'))} | {fmt(graph.get('p50_ms'), 2)} | "
            f"{fmt(graph.get('p99_ms'), 2)} |"
        )

    def served_table(rows: list[dict[str, Any]], lead: str) -> list[str]:
        out = [
            f"| {lead} | precision | path | concurrency | clients | img/s | p50 ms | p99 ms | avg batch | busy "
            "| vs raw best | other CPU |",
            "|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            key = r["intakes"] if lead == "intakes" else r["instances"]
            out.append(
                f"| {key} | {r.get('precision', first)} | {r['path']} | {r['concurrency']} | {r['clients']} | "
                f"{fmt(r['throughput'])} | {fmt(r['p50_ms'], 2)} | {fmt(r['p99_ms'], 2)} | "
                f"{fmt(r['avg_batch'], 2)} | {fmt(r['busy'], 2)} | {fmt(r['vs_raw_best'], 3)} | "
                f"{r['other_cpu']:.0%} |"
            )
        return out

    lines += ["", "## Served", "", *served_table(report["served"], "instances")]
    lines += [
        "",
        "## Latency at half load (gRPC, paced)",
        "",
        "| instances | target req/s (half of best gRPC) | achieved img/s | clients | p50 ms | p99 ms | avg batch |",
        "|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in report["half_load"]:
        lines.append(
            f"| {r['instances']} | {fmt(r['target_rate'])} | {fmt(r['throughput'])} | {r['clients']} | "
            f"{fmt(r['p50_ms'], 2)} | {fmt(r['p99_ms'], 2)} | {fmt(r['avg_batch'], 2)} |"
        )
    if report.get("intake"):
        instances = report["intake"][0]["instances"]
        lines += [
            "",
            f"## Intake scaling ({instances} instance(s), {first}, `--intake-processes` K)",
            "",
            *served_table(report["intake"], "intakes"),
        ]
    lines += perf_analyzer_table(report.get("perf_analyzer", []))
    lines += ["", "## NVML metrics from the server's /metrics (GPU 0, during the top-concurrency gRPC step)", ""]
    for count, values in report["gpu_metrics"].items():
        text = ", ".join(f"{k} {v:g}" for k, v in values.items()) or "absent (no NVML-visible GPU)"
        lines.append(f"- {count} (instances x precision): {text}")
    ratio = served_best["throughput"] / best["throughput"]
    verdict = (
        f"target >= 0.8: {'met' if ratio >= 0.8 else 'NOT met'}"
        if report["gpu"]
        else "no verdict: the 0.8 target is for GPU runs; CPU smoke figures only show that the script works"
    )
    lines += [
        "",
        f"**Best served {first}: {served_best['throughput']:.1f} img/s ({served_best['instances']} instance(s), "
        f"{served_best['path']}, concurrency {served_best['concurrency']}) = {ratio:.3f} x raw best "
        f"({verdict}).**",
        "",
    ]
    return "\n".join(lines)


def perf_analyzer_table(rows: list[dict[str, Any]]) -> list[str]:
    """The perf_analyzer rows, and how K intakes scale against one."""
    if not rows:
        return []
    fmt = serving._fmt
    lines = [
        "",
        f"## perf_analyzer (C++ client): gRPC batch-1 tensors at concurrency {rows[0]['concurrency']}, "
        f"{rows[0]['instances']} instance(s), {rows[0]['precision']}",
        "",
        "CPU us per request from /proc (model process, intake processes) and getrusage (perf_analyzer).",
        "",
        "| intakes | img/s | vs raw best | avg batch | model us/req | intakes us/req | client us/req |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['intakes']} | {fmt(r['throughput'])} | {fmt(r['vs_raw_best'], 3)} | {fmt(r['avg_batch'], 2)} | "
            f"{fmt(r['model_us'])} | {fmt(r['intake_us'])} | {fmt(r['client_us'])} |"
        )
    fewest, most = min(rows, key=lambda r: r["intakes"]), max(rows, key=lambda r: r["intakes"])
    if most["intakes"] > fewest["intakes"]:
        scaling = most["throughput"] / fewest["throughput"]
        lines += ["", f"{most['intakes']} intakes / {fewest['intakes']}: {scaling:.2f}x the img/s."]
    return lines


# --- main ----------------------------------------------------------------------------------------


def check(model_file: Path, args: argparse.Namespace, precisions: Sequence[str], gpu: bool) -> int:
    """What a CPU can check of a GPU run: every repository the run would serve parses as Ferry reads
    it (GPU settings included), and the tensor model loads through Ferry here and answers a batch."""
    from ferry.backends.torch_options import TorchOptions
    from ferry.repository.config import read_config_file
    from ferry.repository.model import load_version

    for precision in precisions:
        for kind, device in (("KIND_GPU", "GPU"), ("KIND_CPU", "CPU")):
            repo = WORK / f"check-{kind}-{precision}"
            shutil.rmtree(repo, ignore_errors=True)
            torch_models.write_repository(
                repo,
                model_file,
                kind=kind,
                instances=1,  # one instance loads quickly; the count does not change what is checked
                max_batch_size=args.max_batch_size,
                precision=precision,
                graphs=kind == "KIND_GPU",
                preprocess_device=device,
                decode=args.decode or device,
            )
            for name in ("resnet50", "resnet50_images"):
                config = read_config_file(repo / name)
                assert config is not None, f"{repo / name}: no config"
                options = TorchOptions.from_config(config)
                print(f"{kind} {precision} {name}: parsed; CUDA graph buckets {options.graph_batch_sizes or 'none'}")
    repo = WORK / f"check-{'KIND_GPU' if gpu else 'KIND_CPU'}-{precisions[0]}"
    config = read_config_file(repo / "resnet50")
    assert config is not None
    version = load_version(repo / "resnet50", 1, config, "check")
    try:
        batch = models.sample_image(batch=2)
        logits = version.instances[0].compute({"input": batch}, ["logits"])["logits"]
        assert logits.shape == (2, torch_models.NUM_CLASSES) and np.isfinite(logits).all(), logits.shape
        print(f"resnet50 loaded by Ferry on {version.instances[0].device}: a batch of 2 answered {logits.shape}")
    finally:
        version.close()
    from ferry.pipelines.device_decode import torchvision_problem

    problem = torchvision_problem()
    print(f"torchvision's JPEG decoder (decode: GPU): {problem or 'usable'}")
    if gpu and (args.decode or "GPU") == "GPU" and problem:
        print(f"check failed: the image path decodes on the GPU and needs torchvision ({problem})")
        return 1
    print("check passed: the benchmark is ready to run")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny settings that also run on a CPU")
    parser.add_argument("--check", action="store_true", help="check the set-up (no server, no timing) and exit")
    parser.add_argument(
        "--duration",
        type=float,
        help="seconds per served measurement window; raw windows are half as long (2; smoke 3)",
    )
    parser.add_argument("--windows", type=int, help="measurement windows per step (3; smoke 1)")
    parser.add_argument("--raw-batches", type=int, nargs="+", help="raw batch sizes (1 2 4 ... 128; smoke 1 4)")
    parser.add_argument("--concurrency", type=int, nargs="+", help="served concurrencies (16 64 128 256; smoke 1 4)")
    parser.add_argument("--instances", type=int, nargs="+", help="instance counts on GPU 0 (1 2 3 4; smoke 1 2)")
    parser.add_argument("--processes", type=int, help="client processes at most (8; smoke 2)")
    parser.add_argument("--max-batch-size", type=int, help="server max_batch_size (128; smoke 4)")
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=("fp16", "fp32"),
        help="precisions: the first served at every instance count, the rest with the fewest (GPU: fp16 fp32)",
    )
    parser.add_argument(
        "--decode",
        choices=["CPU", "GPU"],
        help="where the image path decodes JPEGs with preprocess device: GPU (GPU: torchvision's nvJPEG; "
        "default GPU on a GPU)",
    )
    parser.add_argument(
        "--intakes",
        type=int,
        nargs="+",
        help="intake process counts for intake scaling, with the most instances (8+ cores: 1 4 8; else 1 2)",
    )
    parser.add_argument(
        "--perf-analyzer",
        metavar="PATH",
        help="also drive each intake-scaling server with perf_analyzer over gRPC (default: perf_analyzer on PATH, "
        "if any)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="markdown file (results/gpu-torch.md; smoke: results/gpu-torch-cpu-smoke.md); the JSON goes next to it",
    )
    args = parser.parse_args(argv)
    smoke = args.smoke
    args.duration = args.duration or (3.0 if smoke else 2.0)
    args.windows = args.windows or (1 if smoke else 3)
    args.warmup = max(1.0, args.duration / 2)
    args.raw_batches = args.raw_batches or ([1, 4] if smoke else [1, 2, 4, 8, 16, 32, 64, 128])
    args.concurrency = args.concurrency or ([1, 4] if smoke else [16, 64, 128, 256])
    args.instances = args.instances or ([1, 2] if smoke else [1, 2, 3, 4])
    args.processes = args.processes or (2 if smoke else 8)
    args.max_batch_size = args.max_batch_size or (4 if smoke else 128)
    args.intakes = args.intakes or ([1, 2] if smoke or (os.cpu_count() or 1) < 8 else [1, 4, 8])
    args.perf_analyzer = host_path.find_perf_analyzer(args.perf_analyzer)
    output = args.output or RESULTS / ("gpu-torch-cpu-smoke.md" if smoke else "gpu-torch.md")
    argv_text = shlex.join(["python", "benchmarks/gpu_torch.py", *(sys.argv[1:] if argv is None else argv)])

    gpu = torch.cuda.is_available()
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if not gpu:
        print("NOTE: torch sees no CUDA device; these are CPU figures, not GPU figures", flush=True)
    precisions: list[str] = args.precisions or (["fp16", "fp32"] if gpu else ["fp32"])
    started = time.monotonic()
    model_file = torch_models.build_torchscript(WORK / "resnet50.pt")
    if args.check:
        return check(model_file, args, precisions, gpu)
    report: dict[str, Any] = {
        "command": argv_text,
        "gpu": gpu,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "machine": machine(device),
        "settings": {
            "precision": precisions[0],
            "precisions": precisions,
            "graphs": gpu,
            "max_batch_size": args.max_batch_size,
            "kind": "KIND_GPU" if gpu else "KIND_CPU",
            "decode": (args.decode or "GPU") if gpu else "CPU",
            "processes": args.processes,
            "warmup_s": args.warmup,
            "window_s": args.duration,
            "windows": args.windows,
        },
    }
    our_pids = [os.getpid()]
    meter = serving.CpuMeter(lambda: our_pids)
    raw_by_precision: dict[str, list[dict[str, Any]]] = {}
    report["raw"], report["raw_other_cpu"] = [], {}
    for precision in precisions:
        print(f"raw torch on {report['machine']['device']} ({precision})", flush=True)
        cpu = meter.snapshot()
        rows = raw_benchmark(
            model_file, device, precision == "fp16", args.raw_batches, max(0.5, args.duration / 2), args.windows
        )
        report["raw_other_cpu"][precision] = meter.other_share(cpu, meter.snapshot())
        for row in rows:
            row["precision"] = precision
        raw_by_precision[precision] = rows
        report["raw"] += rows
        if gpu:
            torch.cuda.empty_cache()
    jpeg = images.make_jpegs(1)[0]
    pool = serving.WorkerPool(args.processes)
    our_pids += [process.pid for process in pool.processes]
    report["served"], report["half_load"], report["gpu_metrics"], report["intake"] = [], [], {}, []
    report["perf_analyzer"] = []

    def serve(instances: int, precision: str, intakes: int | None = None) -> serving.FerryProcess:
        """A server of ``instances`` x ``precision``; ``intakes``: its ``--intake-processes`` (None: the
        server's default, one intake per four cores; 1: one process, no hand-off)."""
        repo = WORK / f"repo-{instances}-{precision}"
        shutil.rmtree(repo, ignore_errors=True)
        torch_models.write_repository(
            repo,
            model_file,
            kind=report["settings"]["kind"],
            instances=instances,
            max_batch_size=args.max_batch_size,
            precision=precision,
            graphs=gpu,
            preprocess_device="GPU" if gpu else "CPU",
            decode=(args.decode or "GPU") if gpu else "CPU",
        )
        extra = [] if intakes is None else ["--intake-processes", str(intakes)]
        server = serving.FerryProcess(repo, extra=extra)
        try:
            server.wait_ready(["resnet50", "resnet50_images"], timeout=600)
        except BaseException:
            server.stop()
            raise
        server_pids = [server.pid] + [child.pid for child in psutil.Process(server.pid).children(recursive=True)]
        our_pids.extend(server_pids)
        shown = "the default intakes" if intakes is None else f"{intakes} intake(s)"
        print(f"{instances} instance(s), {precision}, {shown}: ferry pids {server_pids}", flush=True)
        return server

    def top_concurrency_steps(
        instances: int, precision: str, intakes: int | None = None, label_suffix: str = ""
    ) -> tuple[list[dict[str, Any]], dict[str, float]]:
        """gRPC tensors and the image path at the top concurrency only, on a server of its own."""
        server = serve(instances, precision, intakes)
        try:
            rows, _, metrics = served_steps(
                pool,
                server,
                args,
                raw_by_precision[precision],
                meter,
                instances,
                jpeg,
                precision,
                concurrencies=[max(args.concurrency)],
                protocols=("grpc",),
                half_load=False,
                label_suffix=label_suffix,
            )
            if args.perf_analyzer and intakes is not None:  # the intake-scaling steps
                row = perf_analyzer_row(server, args, raw_by_precision[precision], instances, precision, intakes)
                report["perf_analyzer"].append(row)
        finally:
            server.stop()
        return rows, metrics

    def checkpoint() -> None:
        """The JSON so far, so that a run cut short still leaves its numbers behind."""
        report["elapsed_s"] = round(time.monotonic() - started, 1)
        output.with_suffix(".partial.json").parent.mkdir(parents=True, exist_ok=True)
        output.with_suffix(".partial.json").write_text(json.dumps(report, indent=1, default=str))

    try:
        first = precisions[0]
        for instances in args.instances:
            server = serve(instances, first)
            try:
                rows, half, metrics = served_steps(
                    pool, server, args, raw_by_precision[first], meter, instances, jpeg, first
                )
            finally:
                server.stop()
            report["served"] += rows
            report["half_load"].append(half)
            report["gpu_metrics"][f"{instances} x {first}"] = metrics
            checkpoint()
        for precision in precisions[1:]:
            instances = min(args.instances)
            rows, metrics = top_concurrency_steps(instances, precision)
            report["served"] += rows
            report["gpu_metrics"][f"{instances} x {precision}"] = metrics
            checkpoint()
        for intakes in args.intakes:
            rows, _ = top_concurrency_steps(max(args.instances), first, intakes, f" {intakes} intake(s)")
            for row in rows:
                row["intakes"] = intakes
            report["intake"] += rows
            checkpoint()
    finally:
        pool.close()
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    serving.write_report(output, render(report), report)
    output.with_suffix(".partial.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
