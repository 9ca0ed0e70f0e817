"""Ensemble benchmark: the same work as separate client calls per stage and as one ensemble
request, at concurrency 1 and 16, in one run against one server.

Workloads:

- ``mlp``: two MLP models (``y = x @ W1 .. @ Wn + b``, width 256, 6 layers each, dynamic batching),
  the second fed the first's output. Separate: the client calls stage 1, then sends its output to
  stage 2. Ensemble: one request to an ensemble of the two.
- ``cascade``: the bundled ``digit_detector`` then ``digits`` on every digit it found (scenes of
  three digits, PNG). Separate: REST ``/detect`` on the detector, crops cut and resized in the
  client with Ferry's own pipeline functions, one gRPC call to ``digits`` with all crops.
  Ensemble: one gRPC request to ``digit_cascade`` (decode, detector, NMS, crop, classifier, top-k).

Closed-loop clients, one thread each; windows of the two ways alternate and each cell is the median
of ``--windows`` windows. Also reported at concurrency 1: the ensemble's server-side mean request
time against the sum of its steps' server-side mean request times over the same windows.

Run: python benchmarks/ensembles.py [--window S] [--windows N] [--workloads mlp cascade]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import tritonclient.grpc as tgrpc

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))
from serving import FerryProcess  # noqa: E402

from ferry.backends.vision_steps.crops import cut  # noqa: E402
from ferry.pipelines import PreprocessSpec, decode_image, preprocess  # noqa: E402
from ferry.repository.config import parse_config_text  # noqa: E402
from tests.ensembles.cascade import DIGIT_PREPROCESS, add_cascade, digit_scenes  # noqa: E402
from tests.models import write_mlp_model  # noqa: E402

WIDTH = 256
LAYERS = 6
CONCURRENCY = (1, 16)
MLP_ENSEMBLE = f"""name: "two_stage"
platform: "ensemble"
max_batch_size: 16
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "stage1" model_version: -1
     input_map {{ key: "x" value: "x" }} output_map {{ key: "y" value: "mid" }} }},
  {{ model_name: "stage2" model_version: -1
     input_map {{ key: "x" value: "mid" }} output_map {{ key: "y" value: "y" }} }}
] }}
"""
Call = Callable[[], np.ndarray]
MakeCall = Callable[[FerryProcess, int], Call]  # (server, client index) -> one request's work


@dataclass
class Workload:
    name: str
    ensemble: str
    steps: tuple[str, ...]
    separate: MakeCall
    together: MakeCall


def build_repo(repo: Path) -> Path:
    for name, offset in (("stage1", 1.0), ("stage2", 2.0)):
        write_mlp_model(
            repo / name,
            width=WIDTH,
            layers=LAYERS,
            offset=offset,
            max_batch_size=16,
            extra_config="dynamic_batching { }\n",
        )
    (repo / "two_stage" / "1").mkdir(parents=True)
    (repo / "two_stage" / "config.pbtxt").write_text(MLP_ENSEMBLE)
    add_cascade(repo)
    return repo


def _input(name: str, array: np.ndarray, datatype: str = "FP32") -> tgrpc.InferInput:
    tensor = tgrpc.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _mlp_x(index: int) -> np.ndarray:
    return np.random.default_rng(index).standard_normal((1, WIDTH)).astype(np.float32)


def mlp_separate(server: FerryProcess, index: int) -> Call:
    client, x = tgrpc.InferenceServerClient(server.grpc_url), _mlp_x(index)

    def call() -> np.ndarray:
        mid = client.infer("stage1", [_input("x", x)]).as_numpy("y")
        return client.infer("stage2", [_input("x", mid)]).as_numpy("y")

    return call


def mlp_ensemble(server: FerryProcess, index: int) -> Call:
    client, x = tgrpc.InferenceServerClient(server.grpc_url), _mlp_x(index)
    return lambda: client.infer("two_stage", [_input("x", x)]).as_numpy("y")


SCENES, _ = digit_scenes(16, seed=7)


def cascade_separate(server: FerryProcess, index: int) -> Call:
    http = httpx.Client(base_url=f"http://{server.http_url}", timeout=60)
    client = tgrpc.InferenceServerClient(server.grpc_url)
    image = SCENES[index % len(SCENES)]
    config = parse_config_text(f"ferry_image {{ preprocess {{ {DIGIT_PREPROCESS} }} }}", "digits")
    spec = PreprocessSpec.from_config(config.ferry_image.preprocess, [1, 28, 28], "FP32")

    def call() -> np.ndarray:
        response = http.post("/v2/models/digit_detector/detect", content=image, headers={"content-type": "image/png"})
        found = response.json()["results"][0]["detections"]
        picture = decode_image(image, max_pixels=10**7)
        crops = np.stack([preprocess(cut(picture, np.array(d["box"])), spec)[0] for d in found])
        return client.infer("digits", [_input("input", crops)]).as_numpy("logits").argmax(axis=1)

    return call


def cascade_ensemble(server: FerryProcess, index: int) -> Call:
    client = tgrpc.InferenceServerClient(server.grpc_url)
    image = np.array([SCENES[index % len(SCENES)]], dtype=object).reshape(1, 1)
    return lambda: client.infer("digit_cascade", [_input("IMAGE", image, "BYTES")]).as_numpy("CLASS_IDS")[:, 0]


WORKLOADS = {
    "mlp": Workload("mlp", "two_stage", ("stage1", "stage2"), mlp_separate, mlp_ensemble),
    "cascade": Workload(
        "cascade",
        "digit_cascade",
        ("digit_preprocess", "digit_detector", "digit_boxes", "digit_crops", "digits", "digit_top"),
        cascade_separate,
        cascade_ensemble,
    ),
}


def window(server: FerryProcess, make: MakeCall, concurrency: int, seconds: float) -> tuple[float, float]:
    """One closed-loop window: (requests/s, median client latency in ms)."""
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    start = threading.Barrier(concurrency + 1)
    stop_at = [float("inf")]

    def client(index: int) -> None:
        call = make(server, index)
        call()
        start.wait()
        while (t0 := time.perf_counter()) < stop_at[0]:
            call()
            latencies[index].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    stop_at[0] = began + seconds
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    done = [v for per in latencies for v in per]
    return len(done) / elapsed, statistics.median(done) * 1e3


def mean_request_us(before: dict, after: dict) -> float:
    """Mean server-side request duration between two statistics snapshots."""
    count = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    ns = after["inference_stats"]["success"]["ns"] - before["inference_stats"]["success"]["ns"]
    return ns / max(count, 1) / 1e3


def check_same_answers(server: FerryProcess, workload: Workload) -> None:
    """Both ways must compute the same thing before they are timed."""
    for index in range(4):
        ours, theirs = workload.separate(server, index)(), workload.together(server, index)()
        assert np.allclose(ours, theirs, atol=1e-3), f"{workload.name}: the two ways disagree"


def measure(server: FerryProcess, workload: Workload, concurrency: int, args) -> dict:
    """Alternating windows of the two ways; medians, and the ensemble's server-side overhead."""
    ways = {"separate": workload.separate, "ensemble": workload.together}
    for make in ways.values():
        window(server, make, concurrency, 1.0)  # warm-up
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
    steps_us: list[float] = []
    ensemble_us: list[float] = []
    names = (*workload.steps, workload.ensemble)
    for _ in range(args.windows):
        for way, make in ways.items():
            before = {n: server.stats(n) for n in names}
            results[way].append(window(server, make, concurrency, args.window))
            if way == "ensemble":
                after = {n: server.stats(n) for n in names}
                steps_us.append(sum(mean_request_us(before[n], after[n]) for n in workload.steps))
                ensemble_us.append(mean_request_us(before[workload.ensemble], after[workload.ensemble]))
    cell = {
        way: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for way, rs in results.items()
    }
    cell["server_us"] = (statistics.median(ensemble_us), statistics.median(steps_us))
    return cell


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", type=float, default=3.0, help="seconds per measurement window (3)")
    parser.add_argument("--windows", type=int, default=5, help="windows per cell; the median is reported (5)")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = FerryProcess(build_repo(Path(tmp) / "models"))
        try:
            server.wait_ready([w.ensemble for w in WORKLOADS.values()])
            for name in args.workloads:
                check_same_answers(server, WORKLOADS[name])
                rows.extend((name, c, measure(server, WORKLOADS[name], c, args)) for c in CONCURRENCY)
        finally:
            server.stop()
    print(f"separate calls per stage vs one ensemble request; median of {args.windows} x {args.window:g} s windows")
    print()
    print(
        "| workload | concurrency | separate req/s | ensemble req/s | ratio | separate p50 ms | ensemble p50 ms "
        "| ratio | ensemble server us | sum of steps us | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, concurrency, cell in rows:
        (sep_rps, sep_ms), (ens_rps, ens_ms) = cell["separate"], cell["ensemble"]
        ens_us, steps_us = cell["server_us"]
        print(
            f"| {name} | {concurrency} | {sep_rps:.0f} | {ens_rps:.0f} | {ens_rps / sep_rps:.2f}x "
            f"| {sep_ms:.2f} | {ens_ms:.2f} | {ens_ms / sep_ms:.2f}x | {ens_us:.0f} | {steps_us:.0f} "
            f"| {ens_us / steps_us:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
