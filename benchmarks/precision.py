"""Precision benchmark: FP32 and INT8 ResNet-50 served by one Ferry server in the same run.

Run ``python benchmarks/precision.py [--quick] [--window S] [--windows N]``.

1. Builds the random-weight ResNet-50 (benchmarks/models.py) with an ImageNet-style ``ferry_image``
   pipeline (benchmarks/images.py), so calibration goes through the server's own pre-processing.
2. Writes synthetic calibration JPEGs (smooth random 640x480 images from images.make_jpegs: there is
   no image data set on disk, and with random weights any realistic-looking input will do) and runs
   ``ferry optimize resnet50 --precision int8`` as a command, which also compares INT8 with FP32.
   With random weights that comparison says little about real accuracy (see the digits figures
   in the README for a trained model); it is reported as measured.
3. Starts one server with both models and, over gRPC with batch-1 requests and dynamic batching,
   alternates FP32 and INT8 load steps (two rounds, order reversed in the second) so drift of
   this shared machine reaches both alike. Throughput is the median of every window per model.

Writes benchmarks/results/precision-cpu.md (and .json next to it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import images  # noqa: E402  (benchmarks/ is not a package)
import models  # noqa: E402
import serving  # noqa: E402

WORK = serving.BENCH_DIR / "models" / "precision"
CONCURRENCY = (1, 8)


def build(work: Path, calibration_count: int) -> tuple[Path, str]:
    """The repository with resnet50 (FP32, with ferry_image) and resnet50_int8; returns the optimize log."""
    repo = work / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    model_dir = repo / "resnet50"
    (model_dir / "1").mkdir(parents=True)
    import onnx

    onnx.save(models.build_resnet50(), str(model_dir / "1" / "model.onnx"))
    (model_dir / "config.pbtxt").write_text(models.RESNET_CONFIG + images.PIPELINE)
    calibration = work / "calibration"
    shutil.rmtree(calibration, ignore_errors=True)
    calibration.mkdir(parents=True)
    for index, data in enumerate(images.make_jpegs(calibration_count)):
        (calibration / f"{index:03d}.jpg").write_bytes(data)
    command = [
        sys.executable,
        "-m",
        "ferry",
        "optimize",
        str(model_dir),
        "--precision",
        "int8",
        "--calibration-images",
        str(calibration),
        "--batch-size",
        "8",
        "--force",
        "--quiet",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=serving.ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"ferry optimize failed:\n{done.stderr}")
    return repo, done.stdout.strip().replace(f"{serving.ROOT}/", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="FP32 vs INT8 ResNet-50 through one Ferry server.")
    parser.add_argument("--quick", action="store_true", help="short smoke-test version")
    parser.add_argument("--window", type=float, help="seconds per measurement window (6; quick 1.5)")
    parser.add_argument("--windows", type=int, default=3, help="windows per step (3)")
    parser.add_argument("--calibration-count", type=int, default=64, help="synthetic calibration JPEGs (64)")
    parser.add_argument("--output", type=Path, help="markdown file (benchmarks/results/precision-cpu.md)")
    args = parser.parse_args(argv)
    window = args.window or (1.5 if args.quick else 6.0)
    output = args.output or (
        serving.TMP / "precision-cpu-quick.md" if args.quick else serving.RESULTS / "precision-cpu.md"
    )
    started = time.monotonic()
    argv_text = shlex.join(["python", "benchmarks/precision.py", *(sys.argv[1:] if argv is None else argv)])

    print("building resnet50 and running ferry optimize --precision int8", flush=True)
    t0 = time.monotonic()
    repo, optimize_log = build(WORK, 16 if args.quick else args.calibration_count)
    optimize_s = time.monotonic() - t0
    print(optimize_log, flush=True)
    names = ("resnet50", "resnet50_int8")
    rounds = 1 if args.quick else 2
    image = models.sample_image()
    pool = serving.WorkerPool(1)
    our_pids = [os.getpid(), *(process.pid for process in pool.processes)]
    meter = serving.CpuMeter(lambda: our_pids)  # "other CPU": everything but this benchmark's processes
    results: dict[str, dict[int, list[dict[str, Any]]]] = {n: {c: [] for c in CONCURRENCY} for n in names}
    try:
        with running_server(repo, names) as server:
            our_pids.append(server.pid)
            for concurrency in CONCURRENCY:
                for round_index in range(rounds):
                    order = names if round_index % 2 == 0 else names[::-1]
                    for name in order:
                        step = serving.LoadStep(
                            f"{name} grpc c={concurrency}",
                            "grpc",
                            name,
                            "input",
                            "logits",
                            image,
                            concurrency,
                            1,
                            max(1.0, window / 2),
                            window,
                            args.windows,
                        )
                        results[name][concurrency].append(serving.run_load(pool, server, step, None, meter))
                        time.sleep(0.3)
    finally:
        pool.close()

    rows = []
    for concurrency in CONCURRENCY:
        row: dict[str, Any] = {"concurrency": concurrency}
        for name in names:
            windows = [w for step in results[name][concurrency] for w in step["windows"]]
            row[name] = {
                "throughput": statistics.median(w["throughput"] for w in windows),
                "windows": [round(w["throughput"], 2) for w in windows],
                "p50_ms": statistics.median(w["p50_ms"] for w in windows),
                "avg_batch": statistics.median(w["avg_batch"] for w in windows),
                "other_cpu": max(step["other_cpu"] for step in results[name][concurrency]),
            }
        row["ratio"] = row["resnet50_int8"]["throughput"] / row["resnet50"]["throughput"]
        rows.append(row)
        print(
            f"c={concurrency}: FP32 {row['resnet50']['throughput']:.1f} img/s, INT8 "
            f"{row['resnet50_int8']['throughput']:.1f} img/s, INT8/FP32 {row['ratio']:.2f}",
            flush=True,
        )

    info = serving.machine_info()
    from ferry.optimize.cpu import read_cpu_features

    report = {
        "command": argv_text,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "machine": info,
        "cpu_int8": read_cpu_features().describe(),
        "optimize_log": optimize_log,
        "optimize_s": round(optimize_s, 1),
        "window_s": window,
        "windows": args.windows,
        "rounds": rounds,
        "rows": rows,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    markdown = render(report)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(markdown)
    output.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print("\n" + markdown)
    return 0


@contextlib.contextmanager
def running_server(repo: Path, names: tuple[str, ...]) -> Iterator[serving.FerryProcess]:
    server = serving.FerryProcess(repo)
    try:
        server.wait_ready(list(names))
        yield server
    finally:
        server.stop()


def render(report: dict[str, Any]) -> str:
    info = report["machine"]
    lines = [
        "# FP32 vs INT8 ResNet-50 through one Ferry server (CPU)",
        "",
        f"- command: `{report['command']}` ({report['elapsed_s']:.0f} s; `ferry optimize` took "
        f"{report['optimize_s']:.0f} s)",
        f"- date (UTC): {report['date']}; commit {info['commit'] or '?'}",
        f"- machine: {info['cpu_count']} CPUs ({info['cpu_model']}; INT8 features {report['cpu_int8']}), "
        f"{info['platform']}, Python {info['python']}, onnxruntime {info['onnxruntime']}",
        "- models: random-weight ResNet-50 (benchmarks/models.py), FP32, and `resnet50_int8` written by "
        "`ferry optimize --precision int8` (QDQ, per-channel weights) calibrated on synthetic JPEGs "
        "(images.make_jpegs) through the model's ferry_image pipeline; both max_batch_size 32, "
        "`dynamic_batching { }`, 1 CPU instance, served by the same server process",
        f"- load: gRPC (tritonclient) closed loop, batch-1 FP32 1x3x224x224 requests; per model and concurrency "
        f"{report['rounds']} round(s) of {report['windows']} windows of {report['window_s']:g} s after a warm-up, "
        "FP32 and INT8 steps alternating (order reversed in the second round); throughput is the median "
        "window, counted as in benchmarks/serving.py",
        "- `ferry optimize` output (the agreement is between two random-weight models, so it says little "
        "about a trained model's accuracy):",
        "",
        "```",
        report["optimize_log"],
        "```",
        "",
        "| concurrency | FP32 img/s | INT8 img/s | INT8 / FP32 | FP32 p50 ms | INT8 p50 ms | avg batch FP32 / INT8 "
        "| other CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        fp32, int8 = row["resnet50"], row["resnet50_int8"]
        lines.append(
            f"| {row['concurrency']} | {fp32['throughput']:.1f} | {int8['throughput']:.1f} | "
            f"{row['ratio']:.2f} | {fp32['p50_ms']:.1f} | {int8['p50_ms']:.1f} | "
            f"{fp32['avg_batch']:.2f} / {int8['avg_batch']:.2f} | "
            f"{max(fp32['other_cpu'], int8['other_cpu']):.0%} |"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
