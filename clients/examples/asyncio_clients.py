"""The asyncio clients: many requests in flight from one coroutine, which the server batches.

python asyncio_clients.py [--http 127.0.0.1:8000] [--grpc 127.0.0.1:8001] DIGIT.png
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from ferry_client import AsyncGrpcClient, AsyncHttpClient


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", default="127.0.0.1:8000")
    parser.add_argument("--grpc", default="127.0.0.1:8001")
    parser.add_argument("digit")
    args = parser.parse_args()

    inputs = [np.full((1, 16), i, dtype=np.int32) for i in range(64)]
    async with AsyncHttpClient(args.http) as http, AsyncGrpcClient(args.grpc) as grpc:
        for name, client in (("http", http), ("grpc", grpc)):
            started = time.perf_counter()
            results = await asyncio.gather(*(client.infer("simple", {"INPUT0": x, "INPUT1": x}) for x in inputs))
            assert all((r["OUTPUT0"] == 2 * x).all() for r, x in zip(results, inputs, strict=True))
            print(f"{name}: 64 concurrent requests in {1e3 * (time.perf_counter() - started):.1f} ms")
        top = await http.classify("digits", args.digit, top_k=1)
        print("digit:", top[0].label, f"({top[0].score:.3f})")


if __name__ == "__main__":
    asyncio.run(main())
