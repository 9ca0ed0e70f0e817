"""What relaying a non-inference request to the model process costs: sequential latency, 1 vs N intakes.

Run ``python benchmarks/forwarding_latency.py [--requests N] [--intake-processes 2]``.

With one intake process the server answers health, metadata and the like itself; with several, an
intake process relays them to the model process over unix sockets (``ferry/intake/forward_*.py``).
One client sends ``--requests`` sequential requests of each kind to each server (after a warm-up)
and the table shows median and p99 latency. Idle machine, one connection: this measures the
relay's added latency, not throughput.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx

from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import MODEL_REPO, RunningServer, start_server  # noqa: E402


def percentiles(call: Callable[[], object], count: int) -> tuple[float, float]:
    """Median and p99 latency of ``count`` sequential calls, in microseconds (after a warm-up)."""
    for _ in range(count // 10):
        call()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[count // 2] * 1e6, times[int(count * 0.99)] * 1e6


def rows(server: RunningServer, processes: int, count: int) -> list[str]:
    """One table row per request kind against ``server``."""
    with httpx.Client(base_url=f"http://{server.http_url}") as rest, grpc.insecure_channel(server.grpc_url) as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        calls = {
            "REST GET /v2/health/ready": lambda: rest.get("/v2/health/ready"),
            "REST GET /v2/models/simple": lambda: rest.get("/v2/models/simple"),
            "gRPC ServerMetadata": lambda: stub.ServerMetadata(pb.ServerMetadataRequest()),
        }
        lines = []
        for name, call in calls.items():
            p50, p99 = percentiles(call, count)
            lines.append(f"| {processes} | {name} | {p50:.0f} | {p99:.0f} |")
        return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--intake-processes", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ferry-forwarding-"))
    shutil.copytree(MODEL_REPO / "simple", root / "models" / "simple")
    print("| intake processes | request | p50 us | p99 us |\n|---:|---|---:|---:|")
    for processes in (1, args.intake_processes):
        server = start_server(root / "models", root / f"server-{processes}.log", "--intake-processes", str(processes))
        try:
            print("\n".join(rows(server, processes, args.requests)))
        finally:
            server.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
