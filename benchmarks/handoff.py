"""The intake hand-off alone: CPU per request of each end, with a model that does nothing (issue 39).

``host_path.py`` measures the whole model process, where the hand-off is one cost among the data
plane's, the scheduler's and the engine's, and a shared machine moves its figures by 10-20%. This
isolates the hand-off: a ``HandoffHub`` in a child process whose model answers at once, in batches
of up to ``--batch`` requests answered together (those that arrived within 1 ms, as a dynamic
batcher with a queue delay answers a batch), and a
``HandoffClient`` in this process sending ResNet-50-sized requests (FP32 [1, 3, 224, 224], a [1000]
answer) from ``--concurrency`` callers. CPU per request from /proc (the hub) and
``time.process_time`` (the client, which also copies each 602 KB request into its arena). With
``--baseline CHECKOUT`` the same runs for another checkout's hand-off interleave with this one's.

With ``--model`` the hub is a whole model process instead: a real data plane serving the no-compute
model of ``host_path.py`` (FP32 ``[3, 224, 224]`` in, ``[1000]`` out, ONNX Runtime, dynamic
batching; its Prometheus histograms attached and its objects frozen once up, as a server's are), so
the hub's CPU per request is
the model process's, without the intakes' front doors competing for the cores.

    python benchmarks/handoff.py --baseline /tmp/main-base --rounds 5
    python benchmarks/handoff.py --model --baseline /tmp/main-base --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TICK = os.sysconf("SC_CLK_TCK")
SHAPE = (1, 3, 224, 224)
ANSWER = 1000


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _hub(path: str, batch: int, ready, done) -> None:  # type: ignore[no-untyped-def]
    """The model process's end, answering ``batch`` requests at a time."""
    from ferry.intake.handoff import HandoffHub
    from ferry.types import InferenceRequest, InferenceResponse, OutputTensor

    async def main() -> None:
        waiting: list[asyncio.Future] = []
        loop = asyncio.get_running_loop()

        def answer() -> None:
            for each in waiting:
                if not each.done():
                    each.set_result(None)
            waiting.clear()

        async def infer(request: InferenceRequest) -> InferenceResponse:
            future = loop.create_future()
            waiting.append(future)
            if len(waiting) == 1:  # as a batcher's queue delay: what arrives within 1 ms, or a full batch
                loop.call_later(0.001, answer)
            elif len(waiting) >= batch:
                answer()
            await future
            scores = np.ascontiguousarray(request.inputs["x"].reshape(-1)[:ANSWER])
            return InferenceResponse(request.model_name, "1", request.id, [OutputTensor("y", "FP32", scores, True)])

        hub = HandoffHub(infer, 64 << 20)
        await hub.start(path)
        ready.set()
        while not done.is_set():
            await asyncio.sleep(0.05)
        await hub.close()

    _fast_loop()
    asyncio.run(main())


def _model_hub(path: str, ready, done, batch) -> None:  # type: ignore[no-untyped-def]
    """A model process's end: its data plane serving ``host_path``'s no-compute model; ``batch``
    receives the average batch (items per execution) once done."""
    from host_path import MODEL, build_onnx

    from ferry.api.dataplane import DataPlane
    from ferry.intake.handoff import HandoffHub
    from ferry.intake.model_directory import ModelDirectory
    from ferry.metrics import Metrics
    from ferry.repository.manager import ControlMode, ModelManager

    async def main() -> None:
        repository = Path(tempfile.mkdtemp()) / "models"
        build_onnx(repository / MODEL)
        manager = ModelManager(repository, control_mode=ControlMode.EXPLICIT, startup_models=[MODEL])
        await manager.start()
        plane = DataPlane(manager)
        plane.started = True
        metrics = Metrics(manager.ready_models)  # the histograms a server's model process observes into
        metrics.attach(plane.model(MODEL))
        directory = ModelDirectory(plane)
        try:
            hub = HandoffHub(
                plane.infer, 64 << 20, directory, plane.admission, infer_soon=plane.infer_soon, plans=plane
            )
        except TypeError:  # a checkout from before plans
            try:
                hub = HandoffHub(plane.infer, 64 << 20, directory, plane.admission, infer_soon=plane.infer_soon)
            except (TypeError, AttributeError):  # a checkout from before ``infer_soon``
                hub = HandoffHub(plane.infer, 64 << 20, directory, plane.admission)
        await hub.start(path)
        try:  # as a server's model process does once it is up (``ferry.frozen_objects``)
            from ferry.frozen_objects import freeze_built_objects

            freeze_built_objects()
        except ImportError:  # a checkout from before it
            pass
        ready.set()
        while not done.is_set():
            await asyncio.sleep(0.05)
        stats = plane.model(MODEL).stats
        batch.value = stats.inference_count / max(1, stats.execution_count)
        await hub.close()
        await manager.stop()

    _fast_loop()
    asyncio.run(main())


def _fast_loop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass


def run(requests: int, concurrency: int, batch: int, model: bool = False) -> tuple[float, float, float]:
    """One run: CPU microseconds per request of the hub and of the client, and the model's average
    batch (``--model``; else ``batch``)."""
    from ferry.intake.handoff import HandoffClient
    from ferry.types import InferenceRequest, RequestedOutput

    path = str(Path(tempfile.mkdtemp()) / "hub.sock")
    context = mp.get_context("spawn")
    ready, done = context.Event(), context.Event()
    batches = context.Value("d", float(batch))
    if model:
        hub = context.Process(target=_model_hub, args=(path, ready, done, batches))
    else:
        hub = context.Process(target=_hub, args=(path, batch, ready, done))
    hub.start()
    ready.wait(120)
    x = np.ones(SHAPE, np.float32)
    name, inputs, outputs = ("host_path", "input", "output") if model else ("m", "x", "y")

    async def main() -> tuple[float, float]:
        client = HandoffClient(1, 64 << 20)
        await client.connect(path)

        async def caller(count: int) -> None:
            for i in range(count):
                request = InferenceRequest(
                    name, "", str(i), {inputs: x}, {inputs: "FP32"}, [RequestedOutput(outputs, True)]
                )
                await client.infer(request)

        await asyncio.gather(*(caller(20) for _ in range(concurrency)))  # warm: arenas' pages, allocators
        each = requests // concurrency
        hub0, own0 = _cpu_seconds(hub.pid), time.process_time()
        await asyncio.gather(*(caller(each) for _ in range(concurrency)))
        hub1, own1 = _cpu_seconds(hub.pid), time.process_time()
        client.close()
        done_requests = each * concurrency
        return (hub1 - hub0) / done_requests * 1e6, (own1 - own0) / done_requests * 1e6

    _fast_loop()
    try:
        hub_us, client_us = asyncio.run(main())
    finally:
        done.set()
        hub.join(30)
    return hub_us, client_us, batches.value


def _child(checkout: Path | None, args: argparse.Namespace) -> tuple[float, float, float]:
    """One run in a fresh interpreter importing ``checkout``'s server (this one's when None)."""
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout / "server")
    command = [sys.executable, __file__, "--one", *("--requests", str(args.requests))]
    command += [
        "--concurrency",
        str(args.concurrency),
        "--batch",
        str(args.batch),
        *(["--model"] if args.model else []),
    ]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    hub_us, client_us, batch = out.split()
    return float(hub_us), float(client_us), float(batch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout whose hand-off runs interleaved")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=4096)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8, help="requests the model answers together")
    parser.add_argument("--model", action="store_true", help="the hub is a model process serving a no-compute model")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        hub_us, client_us, batch = run(args.requests, args.concurrency, args.batch, args.model)
        print(f"{hub_us:.2f} {client_us:.2f} {batch:.2f}")
        return 0
    checkouts: dict[str, Path | None] = {"this": None}
    if args.baseline is not None:
        checkouts["baseline"] = args.baseline.resolve()
    runs: dict[str, list[tuple[float, float, float]]] = {label: [] for label in checkouts}
    for round_ in range(args.rounds):
        order = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
        for label in order:
            runs[label].append(_child(checkouts[label], args))
            hub_us, client_us, batch = runs[label][-1]
            print(
                f"round {round_ + 1} {label}: hub {hub_us:.1f} us/req, intake {client_us:.1f} us/req, "
                f"batch {batch:.1f}",
                flush=True,
            )
    answered = "by the no-compute model's data plane" if args.model else f"answered in batches of {args.batch}"
    print(f"\n{args.requests} requests, concurrency {args.concurrency}, {answered}; medians")
    print("| hand-off | model process (hub) us/req | intake (client) us/req | avg batch |\n|---|---:|---:|---:|")
    medians = {
        label: tuple(statistics.median(run[i] for run in values) for i in range(3)) for label, values in runs.items()
    }
    for label, (hub_us, client_us, batch) in medians.items():
        print(f"| {label} | {hub_us:.1f} | {client_us:.1f} | {batch:.1f} |")
    if "baseline" in medians:
        (hub_us, client_us, _), (base_hub, base_client, _) = medians["this"], medians["baseline"]
        print(f"| this / baseline | {hub_us / base_hub:.2f}x | {client_us / base_client:.2f}x | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
