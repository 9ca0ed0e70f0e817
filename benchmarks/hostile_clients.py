"""Hostile clients against a server with the DEFAULT limits, at sizes beyond the attack tests.

Run (about a minute; it opens a few thousand loopback sockets)::

    python benchmarks/hostile_clients.py [--half-open 3000] [--header-mb 8] [--grpc-streams 20000]

For each attack: the clean answer seen, the server's RSS and descriptor count while the attack holds,
and the latency of a gRPC inference by another client measured while it holds. Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ferry_client import AsyncGrpcClient  # noqa: E402
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.conftest import RunningServer, start_server  # noqa: E402
from tests.models import write_mlp_model  # noqa: E402

WIDTH = 64


def _usage(server: RunningServer) -> str:
    process = psutil.Process(server.process.pid)
    return f"RSS {process.memory_info().rss / 2**20:.0f} MiB, {process.num_fds()} fds"


async def _grpc_latency_ms(server: RunningServer) -> float:
    started = time.monotonic()
    async with AsyncGrpcClient(server.grpc_url) as client:
        await client.infer("quick", {"x": np.ones((1, WIDTH), np.float32)})
    return (time.monotonic() - started) * 1000


async def half_open(server: RunningServer, count: int) -> list[str]:
    held, refused = [], 0
    for _ in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"POST /v2/models/quick/infer HTTP/1.1\r\nHost: x\r\n")
        held.append((reader, writer))
    await asyncio.sleep(0.5)  # let the refusals arrive; measured, not asserted
    for reader, _ in held:
        if reader.at_eof() or len(reader._buffer) > 0:  # noqa: SLF001 - a benchmark peeks
            refused += 1
    row = [
        f"{count} connections with half-sent headers",
        f"{refused} refused at once with 503 (cap 1000), the rest 408 after 10 s",
        _usage(server),
        f"{await _grpc_latency_ms(server):.0f} ms",
    ]
    for _, writer in held:
        writer.close()
    return row


async def huge_headers(server: RunningServer, megabytes: int) -> list[str]:
    before = psutil.Process(server.process.pid).memory_info().rss

    async def one() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"GET /v2 HTTP/1.1\r\nHost: x\r\n")
        answer = asyncio.ensure_future(reader.read())
        for _ in range(megabytes * 16):
            if answer.done():
                break
            writer.write((b"X-Filler: " + b"a" * 1000 + b"\r\n") * 64)
            await writer.drain()
        result = await answer
        writer.close()
        return result

    answers = await asyncio.gather(*(one() for _ in range(10)))
    growth = (psutil.Process(server.process.pid).memory_info().rss - before) / 2**20
    statuses = {a.split(b" ")[1].decode() for a in answers if a}
    return [
        f"10 connections sending {megabytes} MB headers, no token",
        f"status {', '.join(sorted(statuses))} at 64 KiB",
        f"RSS growth {growth:.0f} MiB",
        f"{await _grpc_latency_ms(server):.0f} ms",
    ]


async def grpc_streams(server: RunningServer, total: int) -> list[str]:
    connections = 20
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(server.grpc_url, options=options) for _ in range(connections)]
    release = asyncio.Event()

    async def silence():
        await release.wait()
        return
        yield  # pragma: no cover

    async def outcome(call) -> str:
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        return "OK"

    calls = [
        pb_grpc.GRPCInferenceServiceStub(channels[i % connections]).ModelStreamInfer(silence()) for i in range(total)
    ]
    waiting = [asyncio.ensure_future(outcome(call)) for call in calls]
    deadline = time.monotonic() + 60
    while sum(1 for w in waiting if w.done()) < total - 2048 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    refused = sum(1 for w in waiting if w.done())
    usage = _usage(server)
    release.set()
    await asyncio.gather(*waiting)
    for channel in channels:
        await channel.close()
    return [
        f"{total} gRPC streams on {connections} connections",
        f"{refused} refused (RESOURCE_EXHAUSTED, cap 2048 calls; 1000 per connection)",
        usage,
        "n/a (calls capped)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half-open", type=int, default=3000)
    parser.add_argument("--header-mb", type=int, default=8)
    parser.add_argument("--grpc-streams", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        write_mlp_model(repo / "quick", width=WIDTH, layers=1, extra_config="dynamic_batching { }\n")
        server = start_server(repo, Path(tmp) / "server.log")
        try:
            rows = [["attack", "answer", "server while it holds", "gRPC infer by another client"]]
            rows.append(["(idle)", "", _usage(server), f"{asyncio.run(_grpc_latency_ms(server)):.0f} ms"])
            rows.append(asyncio.run(half_open(server, args.half_open)))
            rows.append(asyncio.run(huge_headers(server, args.header_mb)))
            rows.append(asyncio.run(grpc_streams(server, args.grpc_streams)))
            rows.append(["(after)", "", _usage(server), f"{asyncio.run(_grpc_latency_ms(server)):.0f} ms"])
        finally:
            server.stop()
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows[1:]:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
