"""Detection post-processing and other clients: does a /detect client that yields thousands of
candidates per image slow everybody else down?

A detector whose output is a fixed YOLOv8 tensor of 8,400 candidates over 80 classes (the
ONNX model adds 0 x the image's mean to a constant, so the server does no real inference and all
the cost is Ferry's: decode, letterbox, then decoding and NMS of 8,400 candidates with
``score_threshold: 0.01``, as accuracy evaluation runs it). Alongside, tiny-model clients over REST
measure their latency. Windows alternate between idle (tiny clients alone) and loaded (plus one
client posting images to /detect in a loop); the report gives the median over windows of the tiny
clients' p50 and p99, and the loaded/idle p99 ratio (target: under 2). Every client is a process
of its own, so the benchmark's Python never shares a GIL with a client.
Run: python benchmarks/detect_load.py [--windows N] [--duration S] [--clients C]
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402
from serving import TMP, FerryProcess  # noqa: E402

CANDIDATES = 8400
CLASSES = 80
DETECTOR_CONFIG = f"""# 8,400 YOLOv8 candidates whatever the image (built by benchmarks/detect_load.py).
name: "candidates"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "images" data_type: TYPE_FP32 dims: [ 3, 640, 640 ] }} ]
output [ {{ name: "output0" data_type: TYPE_FP32 dims: [ {4 + CLASSES}, {CANDIDATES} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
ferry_image {{
  preprocess {{ color_order: RGB layout: NCHW resize: LETTERBOX interpolation: BILINEAR
                scale: 0.0039215686 pad_value: 114 }}
  detection {{ format: YOLOV8 score_threshold: 0.01 max_detections: 300 }}
}}
"""


def build_detector() -> onnx.ModelProto:
    """output0 = constant candidates + 0 x mean(images), batch first."""
    rng = np.random.default_rng(7)
    centres = rng.uniform(0, 640, (2, CANDIDATES))
    sizes = rng.uniform(8, 160, (2, CANDIDATES))
    scores = rng.uniform(0.0, 0.6, (CLASSES, CANDIDATES))
    table = np.concatenate([centres, sizes, scores]).astype(np.float32)[np.newaxis]
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Squeeze", ["mean", "last"], ["mean3"]),
        helper.make_node("Mul", ["mean3", "zero"], ["nothing"]),
        helper.make_node("Add", ["table", "nothing"], ["output0"]),
    ]
    initializers = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.zeros(1, np.float32), "zero"),
        numpy_helper.from_array(np.array([3], np.int64), "last"),
    ]
    graph = helper.make_graph(
        nodes,
        "candidates",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 640, 640])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + CLASSES, CANDIDATES])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", models.OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build_repository(repo: Path) -> Path:
    for name, model, config in (
        ("tiny", models.build_tiny(), models.TINY_CONFIG),
        ("candidates", build_detector(), DETECTOR_CONFIG),
    ):
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(repo / name / "1" / "model.onnx"))
        (repo / name / "config.pbtxt").write_text(config)
    return repo


def tiny_client(port: int, stop_at: float, out: mp.Queue) -> None:
    """Sequential tiny-model requests over REST (JSON) until ``stop_at``; sends the latencies (ns)."""
    body = json.dumps(
        {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}
    ).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port)
    latencies = []
    while time.monotonic() < stop_at:
        started = time.perf_counter_ns()
        connection.request("POST", "/v2/models/tiny/infer", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"tiny: HTTP {response.status}")
        latencies.append(time.perf_counter_ns() - started)
    out.put(latencies)


def detect_client(port: int, stop_at: float, out: mp.Queue) -> None:
    """/detect in a loop until ``stop_at``; sends (images posted, detections in the last answer)."""
    image = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (480, 640, 3), np.uint8)).save(image, "JPEG")
    connection = http.client.HTTPConnection("127.0.0.1", port)
    posted, found = 0, 0
    while posted == 0 or time.monotonic() < stop_at:  # at least one, even on a slow start
        connection.request("POST", "/v2/models/candidates/detect", image.getvalue(), {"Content-Type": "image/jpeg"})
        response = connection.getresponse()
        answer = response.read()
        if response.status != 200:
            raise RuntimeError(f"detect: HTTP {response.status}: {answer[:200]!r}")
        posted += 1
        found = len(json.loads(answer)["results"][0]["detections"])
    out.put((posted, found))


def window(port: int, clients: int, duration: float, loaded: bool) -> tuple[float, float, float]:
    """One window: tiny clients' p50 and p99 (ms), and /detect images/s (0 when idle)."""
    context = mp.get_context("spawn")
    results: mp.Queue = context.Queue()
    detections: mp.Queue = context.Queue()
    stop_at = time.monotonic() + duration + 1.0  # clients start within the first second
    workers = [context.Process(target=tiny_client, args=(port, stop_at, results)) for _ in range(clients)]
    if loaded:
        workers.append(context.Process(target=detect_client, args=(port, stop_at, detections)))
    for worker in workers:
        worker.start()
    latencies = np.concatenate([np.asarray(results.get(timeout=duration + 60)) for _ in range(clients)])
    rate = 0.0
    if loaded:
        posted, found = detections.get(timeout=duration + 60)
        rate = posted / (duration + 1.0)
        if found == 0:
            raise RuntimeError("the detector found nothing: the benchmark measures no post-processing")
    for worker in workers:
        worker.join()
    latencies = latencies[len(latencies) // 10 :]  # the first tenth: clients starting up
    return float(np.percentile(latencies, 50)) / 1e6, float(np.percentile(latencies, 99)) / 1e6, rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3, help="idle/loaded window pairs (default 3)")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per window (default 6)")
    parser.add_argument("--clients", type=int, default=2, help="tiny-model clients (default 2)")
    args = parser.parse_args(argv)
    repo = build_repository(TMP / "detect_load_repo")
    server = FerryProcess(repo)
    try:
        server.wait_ready(["tiny", "candidates"])
        window(server.http_port, args.clients, 2.0, True)  # warm-up: both models, every pool
        idle: list[tuple[float, float, float]] = []
        loaded: list[tuple[float, float, float]] = []
        for _ in range(args.windows):
            idle.append(window(server.http_port, args.clients, args.duration, False))
            loaded.append(window(server.http_port, args.clients, args.duration, True))
    finally:
        server.process.terminate()
        server.process.wait(30)
    idle_p50, idle_p99 = (statistics.median(w[i] for w in idle) for i in (0, 1))
    loaded_p50, loaded_p99 = (statistics.median(w[i] for w in loaded) for i in (0, 1))
    rate = statistics.median(w[2] for w in loaded)
    print(f"tiny clients: {args.clients}, windows: {args.windows} x {args.duration:.0f} s (medians over windows)")
    print("| tiny-model REST latency | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    print(f"| idle | {idle_p50:.2f} | {idle_p99:.2f} |")
    load = f"one client posting /detect ({CANDIDATES} candidates/image, {rate:.1f} images/s)"
    print(f"| {load} | {loaded_p50:.2f} | {loaded_p99:.2f} |")
    print(f"p99 loaded / idle: {loaded_p99 / idle_p99:.2f} (target < 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
