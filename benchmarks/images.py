"""Image-path benchmark: JPEGs into a 224x224 ResNet-50 through the server's image pipeline, against
the same model fed ready-made tensors, in one run.

Prints (1) per-image decode and pre-process time of each resize engine (OpenCV, Pillow), with and
without draft JPEG decoding, measured in this process; (2) images/s of the image path (JPEG in,
top-5 out) and of the tensor path (tensor in, top-5 out) at one concurrency, as medians of
interleaved windows in one run, with their ratio (target >= 0.95) and the server's own per-image
decode / pre-process time under that load.

With ``--baseline CHECKOUT`` (e.g. ``git worktree add --detach /tmp/base <commit>``) a second server
runs that checkout's code on the same repository, and every path (tensor, image over V2, and
``POST /classify`` over REST) is measured on both servers in the same interleaved rounds, so the table
gives this checkout / baseline for each path measured in the same minutes.
Run: python benchmarks/images.py [--duration S] [--windows N] [--concurrency C] [--baseline CHECKOUT]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
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
ENGINES = {"OPENCV": mc.FerryPreprocess.OPENCV, "PILLOW": mc.FerryPreprocess.PILLOW}
SIZES = [(640, 480), (1920, 1080)]
RESULTS = Path(__file__).resolve().parent / "results"


def make_jpegs(count: int = 16, size: tuple[int, int] = (640, 480)) -> list[bytes]:
    """Smooth random photo-like images (noise upsampled), JPEG quality 90."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        small = (rng.random((12, 16, 3)) * 255).astype(np.uint8)
        image = Image.fromarray(small).resize(size, Image.Resampling.BICUBIC)
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


def in_process_costs(jpegs: list[bytes], engine: int, draft: bool) -> tuple[float, float]:
    """Median ms per image to decode and to pre-process, measured in this process."""
    from google.protobuf import text_format

    config = text_format.Parse(PIPELINE, mc.ModelConfig())
    config.ferry_image.preprocess.resize_engine = engine
    config.ferry_image.preprocess.draft_decode = draft
    spec = PreprocessSpec.from_config(config.ferry_image.preprocess, [3, 224, 224], "FP32")
    decode_ms, pre_ms = [], []
    for _ in range(5):
        for data in jpegs:
            t0 = time.perf_counter()
            image = decode_image(data, max_pixels=40_000_000, target_size=spec.draft_size)
            t1 = time.perf_counter()
            preprocess(image, spec)
            t2 = time.perf_counter()
            decode_ms.append((t1 - t0) * 1e3)
            pre_ms.append((t2 - t1) * 1e3)
    return statistics.median(decode_ms), statistics.median(pre_ms)


def engine_table() -> list[str]:
    lines = [
        "| image size | engine | draft decode | decode ms/img | pre-process ms/img |",
        "|---|---|---|---:|---:|",
    ]
    for size in SIZES:
        jpegs = make_jpegs(8, size)
        for name, engine in ENGINES.items():
            for draft in (False, True):
                decode_ms, pre_ms = in_process_costs(jpegs, engine, draft)
                lines.append(
                    f"| {size[0]}x{size[1]} | {name} | {'on' if draft else 'off'} | {decode_ms:.2f} | {pre_ms:.2f} |"
                )
    return lines


#: One thread's client: (send one request, close).
Client = tuple[Callable[[], None], Callable[[], None]]


def closed_loop(concurrency: int, duration: float, client: Callable[[int], Client]) -> float:
    """Requests/s of ``concurrency`` threads over ``duration`` s, each after one warm-up request.

    ``client(index)`` opens one thread's client and returns (send one request, close)."""
    count = [0]
    lock = threading.Lock()
    stop_at = [0.0]
    start = threading.Barrier(concurrency + 1)

    def run(index: int) -> None:
        send, close = client(index)
        send()
        start.wait()
        done = 0
        while time.perf_counter() < stop_at[0]:
            send()
            done += 1
        with lock:
            count[0] += done
        close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + 1e9
    start.wait()
    began = time.perf_counter()
    stop_at[0] = began + duration
    for t in threads:
        t.join()
    return count[0] / (time.perf_counter() - began)


def load(server: FerryProcess, model: str, make_input, outputs, concurrency: int, duration: float) -> float:
    """Closed-loop images/s of gRPC V2 infer over ``duration`` seconds after a short warm-up."""

    def client(_: int) -> Client:
        c = tgrpc.InferenceServerClient(server.grpc_url)
        inputs = make_input()
        return lambda: c.infer(model, inputs, outputs=outputs), c.close

    return closed_loop(concurrency, duration, client)


def classify_load(server: FerryProcess, model: str, jpegs: list[bytes], concurrency: int, duration: float) -> float:
    """Closed-loop images/s of ``POST /v2/models/{model}/classify?top_k=5`` (raw JPEG body, keep-alive)."""
    import http.client

    def client(index: int) -> Client:
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
        body = jpegs[index % len(jpegs)]

        def post() -> None:
            connection.request("POST", f"/v2/models/{model}/classify?top_k=5", body, {"Content-Type": "image/jpeg"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"/classify answered {response.status}")

        return post, connection.close

    return closed_loop(concurrency, duration, client)


def resnet_inputs(jpegs: list[bytes]) -> tuple[Callable[[], list], Callable[[], list], list]:
    """Makers of one request's inputs (a random tensor; one of ``jpegs``) and the top-5 output."""
    tensor = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)

    def tensor_input() -> list:
        t = tgrpc.InferInput("input", [1, 3, 224, 224], "FP32")
        t.set_data_from_numpy(tensor)
        return [t]

    def image_input() -> list:
        t = tgrpc.InferInput("input", [1], "BYTES")
        t.set_data_from_numpy(np.array([jpegs[threading.get_ident() % len(jpegs)]], dtype=object))
        return [t]

    return tensor_input, image_input, [tgrpc.InferRequestedOutput("logits", class_count=5)]


def baseline_rows(
    servers: dict[str, FerryProcess], paths: dict[str, Callable[[FerryProcess], float]], windows: int
) -> tuple[dict[tuple[str, str], list[float]], list[str]]:
    """Each path on each server in interleaved rounds (server order rotated each round); the table."""
    rates: dict[tuple[str, str], list[float]] = {(s, p): [] for s in servers for p in paths}
    names = list(servers)
    for round_index in range(windows):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for path, run in paths.items():
            for name in order:
                rates[(name, path)].append(run(servers[name]))
    lines = ["| path | server | median img/s | this / baseline | windows img/s |", "|---|---|---:|---:|---|"]
    for path in paths:
        base = statistics.median(rates[("baseline", path)])
        for name in names:
            median = statistics.median(rates[(name, path)])
            windows_text = ", ".join(f"{r:.1f}" for r in rates[(name, path)])
            lines.append(f"| {path} | {name} | {median:.1f} | {median / base:.3f} | {windows_text} |")
    return rates, lines


def scrape(server: FerryProcess, name: str, model: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    match = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per window (5)")
    parser.add_argument("--windows", type=int, default=5, help="windows per path, interleaved (5)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--baseline", type=Path, help="checkout to compare against, measured in the same rounds")
    args = parser.parse_args(argv)
    if args.baseline is not None:
        return compare_with_baseline(args, argv)
    engines = engine_table()
    jpegs = make_jpegs()
    repo = build_repo(models.DEFAULT_REPO)
    tensor_input, image_input, top5 = resnet_inputs(jpegs)

    tensor_rates, image_rates = [], []
    load_before = os.getloadavg()[0]
    server = FerryProcess(repo)
    try:
        server.wait_ready(["resnet50", "resnet50_images"])
        for _ in range(args.windows):  # interleaved, so a change in machine load hits both paths
            tensor_rates.append(load(server, "resnet50", tensor_input, top5, args.concurrency, args.duration))
            image_rates.append(load(server, "resnet50_images", image_input, top5, args.concurrency, args.duration))
        images = scrape(server, "ferry_image_count", "resnet50_images")
        server_decode = scrape(server, "ferry_image_decode_duration_us", "resnet50_images") / max(images, 1) / 1e3
        server_pre = scrape(server, "ferry_image_preprocess_duration_us", "resnet50_images") / max(images, 1) / 1e3
    finally:
        server.stop()
    tensor_rate, image_rate = statistics.median(tensor_rates), statistics.median(image_rates)
    lines = [
        "Per image, in this process (synthetic photo-like JPEGs, quality 90; ImageNet pipeline: shorter side 256, "
        "crop 224, BILINEAR, FP32 NCHW normalised):",
        "",
        *engines,
        "",
        f"Image path (640x480 JPEG in, top-5 out) vs tensor path (FP32 tensor in, top-5 out), ResNet-50 (random "
        f"weights), gRPC, concurrency {args.concurrency}, default engine (OpenCV), {args.windows} interleaved windows "
        f"of {args.duration:.0f} s per path; clients in this process share the machine with the server.",
        "",
        "| path | median img/s | windows img/s |",
        "|---|---:|---|",
        f"| tensor | {tensor_rate:.1f} | {', '.join(f'{r:.1f}' for r in tensor_rates)} |",
        f"| image | {image_rate:.1f} | {', '.join(f'{r:.1f}' for r in image_rates)} |",
        "",
        f"Ratio image/tensor (medians): {image_rate / tensor_rate:.2f} (target >= 0.95). Inside the server under "
        f"this load: decode {server_decode:.2f} ms, pre-process {server_pre:.2f} ms per image.",
        "",
        f"Machine load average (1 min) before / after the windows: {load_before:.1f} / {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores (other work shares this machine: absolute rates vary, the ratio is the result).",
    ]
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    command = "python benchmarks/images.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (RESULTS / "images-cpu.md").write_text(table + f"\n\nCommand: {command.strip()}\n")
    return 0


def compare_with_baseline(args: argparse.Namespace, argv: list[str] | None) -> int:
    """This checkout and ``--baseline`` side by side on every image-serving path, interleaved."""
    jpegs = make_jpegs()
    repo = build_repo(models.DEFAULT_REPO)
    tensor_input, image_input, top5 = resnet_inputs(jpegs)

    c, d = args.concurrency, args.duration
    paths = {
        "tensor (gRPC V2)": lambda s: load(s, "resnet50", tensor_input, top5, c, d),
        "image (gRPC V2, JPEG)": lambda s: load(s, "resnet50_images", image_input, top5, c, d),
        "/classify (REST, JPEG)": lambda s: classify_load(s, "resnet50_images", jpegs, c, d),
    }
    load_before = os.getloadavg()[0]
    launcher = ("env", f"PYTHONPATH={args.baseline.resolve() / 'server'}", sys.executable, "-m", "ferry")
    servers = {"baseline": FerryProcess(repo, launcher), "this": FerryProcess(repo)}
    try:
        for server in servers.values():
            server.wait_ready(["resnet50", "resnet50_images"])
        _, rows = baseline_rows(servers, paths, args.windows)
    finally:
        for server in servers.values():
            server.stop()
    lines = [
        f"This checkout vs baseline `{args.baseline}`, ResNet-50 (random weights), 640x480 JPEGs, concurrency {c}, "
        f"{args.windows} interleaved rounds of {d:.0f} s windows (server order rotated each round); both servers "
        "run at once on the same repository, the one not being measured idle.",
        "",
        *rows,
        "",
        f"Machine load average (1 min) before / after: {load_before:.1f} / {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores.",
    ]
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    command = "python benchmarks/images.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (RESULTS / "images-vs-baseline-cpu.md").write_text(table + f"\n\nCommand: {command.strip()}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
