"""Image-path benchmark: 640x480 JPEGs into a 224x224 ResNet-50 through the server's image pipeline,
against the same model fed ready-made tensors, in one run.

Prints a table of per-image decode / pre-process / queue / infer time and end-to-end images/s of
both paths at several concurrencies (closed-loop gRPC clients, one thread each).
Run: python benchmarks/images.py [--duration S]
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as tgrpc
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402
from serving import FerryProcess  # noqa: E402

from ferry.pipelines import PreprocessSpec, decode_image, preprocess  # noqa: E402
from ferry_client.protocol import model_config_pb2 as mc  # noqa: E402

PIPELINE = """
ferry_image {
  preprocess { color_order: RGB layout: NCHW resize: SHORTER_SIDE_CENTER_CROP interpolation: BILINEAR
               mean: [0.485, 0.456, 0.406] std: [0.229, 0.224, 0.225] }
  classification { softmax: true top_k: 5 }
}
"""
RESULTS = Path(__file__).resolve().parent / "results"


def make_jpegs(count: int = 16) -> list[bytes]:
    """Smooth random 640x480 photos-like images (noise upsampled), JPEG quality 90."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        small = (rng.random((12, 16, 3)) * 255).astype(np.uint8)
        image = Image.fromarray(small).resize((640, 480), Image.Resampling.BICUBIC)
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def build_repo(repo: Path) -> Path:
    models.build_repository(repo)
    image_dir = repo / "resnet50_images"
    if not image_dir.exists():
        (image_dir / "1").mkdir(parents=True)
        shutil.copy(repo / "resnet50" / "1" / "model.onnx", image_dir / "1" / "model.onnx")
        config = (repo / "resnet50" / "config.pbtxt").read_text().replace('name: "resnet50"', 'name: "resnet50_images"')
        (image_dir / "config.pbtxt").write_text(config + PIPELINE)
    return repo


def in_process_costs(jpegs: list[bytes]) -> tuple[float, float]:
    """Median ms per image to decode and to pre-process, measured in this process."""
    from google.protobuf import text_format

    config = text_format.Parse(PIPELINE, mc.ModelConfig())
    spec = PreprocessSpec.from_config(config.ferry_image.preprocess, [3, 224, 224], "FP32")
    decode_ms, pre_ms = [], []
    for _ in range(5):
        for data in jpegs:
            t0 = time.perf_counter()
            image = decode_image(data, max_pixels=40_000_000, target_size=spec.decode_size)
            t1 = time.perf_counter()
            preprocess(image, spec)
            t2 = time.perf_counter()
            decode_ms.append((t1 - t0) * 1e3)
            pre_ms.append((t2 - t1) * 1e3)
    return statistics.median(decode_ms), statistics.median(pre_ms)


def load(server: FerryProcess, model: str, make_input, concurrency: int, duration: float) -> float:
    """Closed-loop images/s over ``duration`` seconds after a short warm-up."""
    count = [0]
    lock = threading.Lock()
    stop_at = [0.0]
    start = threading.Barrier(concurrency + 1)

    def client() -> None:
        c = tgrpc.InferenceServerClient(server.grpc_url)
        inputs = make_input()
        c.infer(model, inputs)
        start.wait()
        done = 0
        while time.perf_counter() < stop_at[0]:
            c.infer(model, inputs)
            done += 1
        with lock:
            count[0] += done
        c.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + 1e9
    start.wait()
    began = time.perf_counter()
    stop_at[0] = began + duration
    for t in threads:
        t.join()
    return count[0] / (time.perf_counter() - began)


def scrape(server: FerryProcess, name: str, model: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    match = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement (10)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    args = parser.parse_args(argv)
    jpegs = make_jpegs()
    decode_ms, pre_ms = in_process_costs(jpegs)
    repo = build_repo(models.DEFAULT_REPO)
    tensor = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)

    def tensor_input():
        t = tgrpc.InferInput("input", [1, 3, 224, 224], "FP32")
        t.set_data_from_numpy(tensor)
        return [t]

    def image_input():
        t = tgrpc.InferInput("input", [1], "BYTES")
        t.set_data_from_numpy(np.array([jpegs[threading.get_ident() % len(jpegs)]], dtype=object))
        return [t]

    rows = []
    server = FerryProcess(repo)
    try:
        server.wait_ready(["resnet50", "resnet50_images"])
        for concurrency in args.concurrency:
            tensor_rate = load(server, "resnet50", tensor_input, concurrency, args.duration)
            before = server.stats("resnet50_images")
            image_rate = load(server, "resnet50_images", image_input, concurrency, args.duration)
            after = server.stats("resnet50_images")
            requests = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
            queue_ms = (after["inference_stats"]["queue"]["ns"] - before["inference_stats"]["queue"]["ns"]) / 1e6
            infer_ms = (
                after["inference_stats"]["compute_infer"]["ns"] - before["inference_stats"]["compute_infer"]["ns"]
            ) / 1e6
            rows.append(
                (concurrency, tensor_rate, image_rate, queue_ms / max(requests, 1), infer_ms / max(requests, 1))
            )
        images = scrape(server, "ferry_image_count", "resnet50_images")
        server_decode = scrape(server, "ferry_image_decode_duration_us", "resnet50_images") / max(images, 1) / 1e3
        server_pre = scrape(server, "ferry_image_preprocess_duration_us", "resnet50_images") / max(images, 1) / 1e3
    finally:
        server.stop()
    lines = [
        f"Image path vs tensor path, ResNet-50 (random weights) 224x224, 640x480 JPEG inputs, gRPC, "
        f"{args.duration:.0f} s per step, clients: one thread per concurrency slot in one process",
        "",
        f"In-process per image: decode {decode_ms:.2f} ms (JPEG draft mode), pre-process {pre_ms:.2f} ms. "
        f"Inside the server under load: decode {server_decode:.2f} ms, pre-process {server_pre:.2f} ms per image.",
        "",
        "| concurrency | tensor path img/s | image path img/s | image/tensor | queue ms/req (images) "
        "| infer ms/req (images) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for concurrency, tensor_rate, image_rate, queue_ms, infer_ms in rows:
        lines.append(
            f"| {concurrency} | {tensor_rate:.1f} | {image_rate:.1f} | {image_rate / tensor_rate:.2f} "
            f"| {queue_ms:.1f} | {infer_ms:.1f} |"
        )
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "images-cpu.md").write_text(table + "\n\nCommand: python benchmarks/images.py\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
