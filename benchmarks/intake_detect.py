"""``/detect`` images/s through one and through two intake processes, in one run.

With two intake processes each one decodes, letterboxes and post-processes (YOLOv8 decoding and
NMS) its own requests and hands only tensors to the model process; with one process all of that
happens in that process's worker pool. Servers run side by side on one repository (the bundled
``digit_detector``: a YOLOv8-style head on 128x128 letterboxed RGB); an optional ``--baseline``
checkout (e.g. main before the intakes ran the front half, which relayed ``/detect`` to the model
process) runs with two intake processes as well.

Clients are processes of their own (so the benchmark's Python shares no GIL with them), each
posting one 640x480 PNG scene per request over a keep-alive connection. Windows alternate between
the servers (the order rotated each round); per window: images/s, and the CPU time of the model
process and of its intake processes per image (utime + stime from /proc). Medians over the rounds.
The load average is read before and after, since the 2-core machine is shared.

    python benchmarks/intake_detect.py [--rounds 5] [--window 4] [--clients 4] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import http.client
import io
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import ROOT, FerryProcess, cpu_seconds  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
MODEL = "digit_detector"


def scenes(count: int = 16) -> list[bytes]:
    """The detector's held-out synthetic scenes, scaled to 640x480 and saved as PNG."""
    sys.path.insert(0, str(ROOT / "model_repo" / MODEL))
    import build  # model_repo/digit_detector/build.py

    pngs = []
    for scene in build.held_out_scenes(count=count):
        image = Image.fromarray(scene.image).resize((640, 480), Image.Resampling.BILINEAR)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        pngs.append(buffer.getvalue())
    return pngs


def client(port: int, images: list[bytes], start: float, stop: float, done: mp.Queue) -> None:
    """Post images to /detect from ``start`` to ``stop`` (monotonic); report the answers counted."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    count = index = 0
    while time.monotonic() < start:
        time.sleep(0.001)
    while time.monotonic() < stop:
        connection.request(
            "POST", f"/v2/models/{MODEL}/detect", images[index % len(images)], {"Content-Type": "image/png"}
        )
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"/detect answered {response.status}: {body[:200]!r}")
        count += 1
        index += 1
    done.put(count)


def window(server: FerryProcess, images: list[bytes], clients: int, seconds: float) -> tuple[float, float, float]:
    """Images/s, and model-process and intake CPU microseconds per image, over one window."""
    done: mp.Queue = mp.Queue()
    start = time.monotonic() + 0.5  # every client connected and waiting
    workers = [
        mp.Process(target=client, args=(server.http_port, images[i::clients] or images, start, start + seconds, done))
        for i in range(clients)
    ]
    for worker in workers:
        worker.start()
    while time.monotonic() < start:
        time.sleep(0.001)
    own0, below0 = cpu_seconds(server.pid)
    counts = [done.get(timeout=seconds + 60) for _ in workers]
    own1, below1 = cpu_seconds(server.pid)
    for worker in workers:
        worker.join()
    total = max(1, sum(counts))
    return sum(counts) / seconds, (own1 - own0) / total * 1e6, (below1 - below0) / total * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=4.0, help="seconds per window")
    parser.add_argument("--clients", type=int, default=4, help="client processes, one request in flight each")
    parser.add_argument("--baseline", type=Path, help="checkout to compare against (run with 2 intake processes)")
    parser.add_argument("--out", type=Path, default=RESULTS / "intake-detect.md")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="ferry-intake-detect-"))
    repo = workdir / "models"
    shutil.copytree(ROOT / "model_repo" / MODEL, repo / MODEL)
    images = scenes()
    servers: dict[str, FerryProcess] = {}
    if args.baseline is not None:
        launcher = ("env", f"PYTHONPATH={args.baseline.resolve() / 'server'}", sys.executable, "-m", "ferry")
        servers["baseline, 2 intakes (relayed)"] = FerryProcess(repo, launcher, extra=("--intake-processes", "2"))
    servers["1 intake process"] = FerryProcess(repo, extra=("--intake-processes", "1"))
    servers["2 intake processes"] = FerryProcess(repo, extra=("--intake-processes", "2"))
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in servers}
    load_before = os.getloadavg()
    try:
        for server in servers.values():
            server.wait_ready([MODEL])
        for server in servers.values():  # warm-up: first requests, pools started
            window(server, images, args.clients, 1.0)
        names = list(servers)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                runs[name].append(window(servers[name], images, args.clients, args.window))
                speed, own, below = runs[name][-1]
                print(
                    f"round {round_ + 1} {name}: {speed:.1f} images/s, CPU/image {own:.0f} + {below:.0f} us", flush=True
                )
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    load_after = os.getloadavg()
    reference = "1 intake process"
    base_speed = statistics.median(r[0] for r in runs[reference])
    lines = [
        f"# /detect images/s with one and two intake processes ({os.cpu_count()} cores)",
        "",
        f"`python benchmarks/intake_detect.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
        "",
        f"{args.rounds} interleaved rounds of {args.window:g} s windows, {args.clients} client processes "
        f"(one request of one 640x480 PNG in flight each), model `{MODEL}`. Medians. Load average "
        f"(1/5/15 min) before {' / '.join(f'{v:.2f}' for v in load_before)}, after "
        f"{' / '.join(f'{v:.2f}' for v in load_after)}.",
        "",
        f"| server | images/s | vs {reference} | CPU us/image: model process + intakes | runs (images/s) |",
        "|---|---:|---:|---:|---|",
    ]
    for name, windows in runs.items():
        speed = statistics.median(r[0] for r in windows)
        own = statistics.median(r[1] for r in windows)
        below = statistics.median(r[2] for r in windows)
        lines.append(
            f"| {name} | {speed:.1f} | {speed / base_speed:.2f}x | {own + below:.0f} ({own:.0f} + {below:.0f}) | "
            f"{', '.join(f'{r[0]:.0f}' for r in windows)} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
