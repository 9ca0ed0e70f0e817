"""Hostile clients against a server with the DEFAULT limits, at sizes beyond the attack tests.

Run (a few minutes; it opens a few thousand loopback sockets)::

    python benchmarks/hostile_clients.py [--half-open 3000] [--header-mb 8] [--grpc-streams 20000]
    python benchmarks/hostile_clients.py --only-streams [--stream-grpc 1500] [--stream-sse 750]
    python benchmarks/hostile_clients.py --only-many-streams [-- --max-streamed-requests 128]

The rows of issue 38 run against a second server that allows Python models (the decoupled test
models ``repeat`` and ``never_final``).

For each attack: the clean answer seen, the server's RSS and descriptor count while the attack holds,
and the latency of a gRPC inference by another client measured while it holds (for the heavy-request
rows: the worst REST health check while the request runs). The server allows system shared memory
(off by default) for the last two rows. Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    return await _grpc_latency_ms_at(server.grpc_url)


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
        try:
            for _ in range(megabytes * 16):
                if answer.done():
                    break
                writer.write((b"X-Filler: " + b"a" * 1000 + b"\r\n") * 64)
                await writer.drain()
        except ConnectionError:  # the server answered and closed while we were still sending
            pass
        try:
            result = await answer
        except ConnectionError:  # reset before the answer was read: it is lost with the connection
            result = b""
        writer.close()
        return result

    answers = await asyncio.gather(*(one() for _ in range(10)))
    growth = (psutil.Process(server.process.pid).memory_info().rss - before) / 2**20
    statuses = {a.split(b" ")[1].decode() for a in answers if a}
    reset = sum(1 for a in answers if not a)
    return [
        f"10 connections sending {megabytes} MB headers, no token",
        f"status {', '.join(sorted(statuses))} at 64 KiB"
        + (f" ({reset} reset before the answer was read)" if reset else ""),
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


def _worst_health_latency_ms(server: RunningServer, attack) -> tuple[float, object]:
    """Run ``attack`` on a thread while a REST client polls /v2/health/live; the slowest answer."""
    import threading
    import urllib.request

    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(attack()))
    worst = 0.0
    thread.start()
    while thread.is_alive():
        started = time.monotonic()
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/live", timeout=60):
            pass
        worst = max(worst, time.monotonic() - started)
        time.sleep(0.01)
    thread.join()
    return worst * 1000, result[0]


def _post_status(server: RunningServer, path: str, body: bytes, headers: dict[str, str]) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def stalls(server: RunningServer, typed_millions: int) -> list[list[str]]:
    """Work that used to run on the event loop: others' worst latency while it runs."""
    import json
    import zlib
    from concurrent.futures import ThreadPoolExecutor

    from ferry_client.protocol import grpc_service_pb2 as pb

    rows = []
    n = 60_000_000
    head = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, n], "datatype": "FP32", "parameters": {"binary_data_size": 4 * n}}]}
    ).encode()
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = compressor.compress(head) + b"".join(compressor.compress(bytes(2**20)) for _ in range(4 * n // 2**20))
    body += compressor.compress(bytes(4 * n % 2**20)) + compressor.flush()
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Encoding": "gzip",
        "Inference-Header-Content-Length": str(len(head)),
    }
    worst, status = _worst_health_latency_ms(
        server, lambda: _post_status(server, "/v2/models/wide/infer", body, headers)
    )
    rows.append(
        [f"{len(body) // 1024} KB gzip body asking for [1, 60M] FP32 back as JSON", str(status), "", f"{worst:.0f} ms"]
    )

    bomb_compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join(bomb_compressor.compress(bytes(2**20)) for _ in range(1024)) + bomb_compressor.flush()
    json_headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}

    def bombs() -> list[int]:
        with ThreadPoolExecutor(6) as pool:
            return list(
                pool.map(lambda _: _post_status(server, "/v2/models/quick/infer", bomb, json_headers), range(6))
            )

    worst, statuses = _worst_health_latency_ms(server, bombs)
    rows.append(
        [f"6 gzip bombs at once ({len(bomb) // 1024} KB -> 1 GiB)", str(sorted(set(statuses))), "", f"{worst:.0f} ms"]
    )

    count = typed_millions * 1_000_000
    request = pb.ModelInferRequest(model_name="wide")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, count])
    tensor.contents.fp32_contents.extend(np.zeros(count, np.float32).tolist())

    def typed() -> str:
        with grpc.insecure_channel(
            server.grpc_url, options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        ) as channel:
            try:
                pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=300)
                return "OK"
            except grpc.RpcError as exc:
                return exc.code().name

    worst, outcome = _worst_health_latency_ms(server, typed)
    rows.append([f"gRPC fp32_contents of {4 * count // 2**20} MiB", str(outcome), _usage(server), f"{worst:.0f} ms"])
    return rows


def shared_memory(server: RunningServer) -> list[list[str]]:
    """Shared memory abuse (the server allows it here): a region truncated under the server, and
    registrations until the caps refuse them. Each row says the answer and what the server holds."""
    import json
    import os
    import uuid

    key = f"ferry_bench_{uuid.uuid4().hex[:12]}"
    path = Path("/dev/shm") / key
    path.write_bytes(bytes(2**20))
    rows = []
    try:
        register = json.dumps({"key": f"/{key}", "offset": 0, "byte_size": 2**20}).encode()
        json_headers = {"Content-Type": "application/json"}
        assert _post_status(server, "/v2/systemsharedmemory/region/big/register", register, json_headers) == 200
        shm = {"shared_memory_region": "big", "shared_memory_byte_size": 16}
        infer = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": shm}]})
        before = _post_status(server, "/v2/models/wide/infer", infer.encode(), json_headers)
        os.truncate(path, 0)
        after = _post_status(server, "/v2/models/wide/infer", infer.encode(), json_headers)
        alive = "alive" if server.process.poll() is None else f"exited {server.process.returncode}"
        latency = f"{asyncio.run(_grpc_latency_ms(server)):.0f} ms"
        rows.append(["1 MiB region truncated to 0, then read", f"{before} before, {after} after; {alive}", "", latency])
        _post_status(server, "/v2/systemsharedmemory/unregister", b"", {})
        path.write_bytes(bytes(2**20))
        statuses: dict[int, int] = {}
        for index in range(1000):
            status = _post_status(server, f"/v2/systemsharedmemory/region/r{index}/register", register, json_headers)
            statuses[status] = statuses.get(status, 0) + 1
        answer = ", ".join(f"{count} x {status}" for status, count in sorted(statuses.items()))
        latency = f"{asyncio.run(_grpc_latency_ms(server)):.0f} ms"
        rows.append(["1000 registrations by one client", answer, _usage(server), latency])
        _post_status(server, "/v2/systemsharedmemory/unregister", b"", {})
    finally:
        path.unlink(missing_ok=True)
    return rows


DECOUPLED = ROOT / "tests" / "integration" / "decoupled_models"


def _inflight(server: RunningServer) -> float:
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=60) as response:
        text = response.read().decode()
    match = re.search(r"^ferry_inflight_requests (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def _event_stream(server: RunningServer, model: str, body: bytes, source: str = ""):
    """A raw generate_stream client: its socket, once the first event (or an error) arrived."""
    import socket

    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=60, source_address=(source, 0))
    sock.sendall(
        f"POST /v2/models/{model}/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    received = sock.recv(65536)
    while received.startswith(b"HTTP/1.1 200") and b"data: " not in received:
        received += sock.recv(65536)
    return sock, received


def streams(
    tmp: str, grpc_streams: int, sse_streams: int, many_only: bool = False, extra: Sequence[str] = ()
) -> list[list[str]]:
    """Issue 38's stream attacks against decoupled test models (Python models allowed); ``many_only``:
    only the row of many streams; ``extra``: more server flags."""
    import socket
    import threading

    from ferry_client.protocol import grpc_service_pb2 as pb

    repo = Path(tmp) / "decoupled"
    for name in ("repeat", "never_final"):
        shutil.copytree(DECOUPLED / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    write_mlp_model(repo / "quick", width=WIDTH, layers=1, extra_config="dynamic_batching { }\n")
    server = start_server(repo, Path(tmp) / "decoupled.log", "--allow-python-models", *extra)
    rows = []
    try:
        if many_only:
            rows.append(asyncio.run(_many_streams(server, grpc_streams, sse_streams)))
            return rows
        flood = b'{"IN": [' + b",".join([b"0.123456789"] * 65536) + b'], "COUNT": 100000}'

        def leave_and_wait() -> float:
            sock, _ = _event_stream(server, "repeat", flood)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
            started = time.monotonic()
            while _inflight(server):
                time.sleep(0.05)
            return time.monotonic() - started

        worst, ended = _worst_health_latency_ms(server, leave_and_wait)
        rows.append(
            [
                "generate_stream of 100,000 1-MB events, never read, then the client leaves",
                f"stream ended {ended:.1f} s after",
                _usage(server),
                f"{worst:.0f} ms (REST health)",
            ]
        )

        def fast_reader() -> int:
            sock, received = _event_stream(server, "repeat", flood)
            total, deadline = len(received), time.monotonic() + 5
            while time.monotonic() < deadline:
                total += len(sock.recv(1 << 20))
            sock.close()
            return total

        worst, read = _worst_health_latency_ms(server, fast_reader)
        rows.append(
            ["the same read as fast as possible for 5 s", f"{read / 2**20:.0f} MiB read", "", f"{worst:.0f} ms"]
        )

        def one_stream() -> tuple[int, int, float, float]:
            answers: list[pb.ModelStreamInferResponse] = []
            done = threading.Event()
            requests = []
            for index in range(1030):
                request = pb.ModelInferRequest(model_name="never_final", id=str(index))
                request.inputs.add(name="IN", datatype="INT32", shape=[1])
                request.raw_input_contents.append(np.array([index], np.int32).tobytes())
                requests.append(request)

            def send():
                yield from requests
                done.wait(120)

            with grpc.insecure_channel(server.grpc_url) as channel:
                call = pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(send())
                for answer in call:
                    answers.append(answer)
                    if len(answers) == len(requests):
                        break
                latency, inflight = asyncio.run(_grpc_latency_ms(server)), _inflight(server)  # while held
                call.cancel()
                done.set()
            refused = sum(1 for a in answers if a.error_message)
            return len(answers) - refused, refused, latency, inflight

        ok, refused, latency, inflight = one_stream()
        rows.append(
            [
                "one ModelStreamInfer with 1,030 never-final requests",
                f"{ok} open, {refused} refused in the stream",
                f"{inflight:.0f} requests in flight, {_usage(server)}",
                f"{latency:.0f} ms",
            ]
        )
        while _inflight(server):
            time.sleep(0.1)
        rows.append(asyncio.run(_many_streams(server, grpc_streams, sse_streams)))
    finally:
        server.stop()
    return rows


def _other_client(grpc_url: str, http_url: str, done: Any, results: Any) -> None:
    """Another client, in a process of its own (the attack's 2,250 streams share one event loop in
    the benchmark's process, which delayed a client timed there by seconds) and from another address
    (127.0.0.2: the attack's gRPC streams hold 127.0.0.1's share of the calls): a gRPC infer on a new
    connection, one on a connection kept open, then a REST infer on a new connection, one after
    another until ``done``; puts the lists of latencies and the errors."""
    import http.client

    from ferry_client.protocol import grpc_service_pb2 as pb

    host, port = grpc_url.rsplit(":", 1)
    relay = _relay_from(OTHER_ADDRESS, host, int(port))
    kept = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(relay))
    request = pb.ModelInferRequest(model_name="quick")
    request.inputs.add(name="x", datatype="FP32", shape=[1, WIDTH])
    request.raw_input_contents.append(np.ones((1, WIDTH), np.float32).tobytes())
    timed: dict[str, list[float]] = {"gRPC": [], "gRPC kept": [], "REST": []}
    errors: list[str] = []
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, WIDTH], "datatype": "FP32", "data": [1.0] * WIDTH}]})
    rest_host, rest_port = http_url.rsplit(":", 1)
    while not done.is_set():
        try:
            timed["gRPC"].append(asyncio.run(_grpc_latency_ms_at(relay)))
        except Exception as exc:  # reported with the results
            errors.append(f"gRPC: {exc}"[:160])
        started = time.monotonic()
        try:
            kept.ModelInfer(request, timeout=60)
            timed["gRPC kept"].append((time.monotonic() - started) * 1000)
        except grpc.RpcError as exc:
            errors.append(f"gRPC kept: {exc.code().name}")
        started = time.monotonic()
        connection = http.client.HTTPConnection(
            rest_host, int(rest_port), timeout=60, source_address=(OTHER_ADDRESS, 0)
        )
        connection.request("POST", "/v2/models/quick/infer", body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        connection.close()
        if answer.status == 200:
            timed["REST"].append((time.monotonic() - started) * 1000)
        else:
            errors.append(f"REST {answer.status}")
        time.sleep(0.05)
    results.put((timed, errors))


#: The other client's address (the attack's gRPC streams come from 127.0.0.1).
OTHER_ADDRESS = "127.0.0.2"


def _relay_from(source: str, host: str, port: int) -> str:
    """A local TCP relay whose connections reach ``host:port`` from ``source`` (grpc's client
    cannot choose its source address); its address."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))

    def pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while chunk := a.recv(65536):
                b.sendall(chunk)
        except OSError:
            pass
        finally:
            b.close()
            a.close()

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            upstream = socket.create_connection((host, port), source_address=(source, 0))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}"


async def _grpc_latency_ms_at(url: str) -> float:
    started = time.monotonic()
    async with AsyncGrpcClient(url) as client:
        await client.infer("quick", {"x": np.ones((1, WIDTH), np.float32)})
    return (time.monotonic() - started) * 1000


def _percentiles(latencies: list[float]) -> str:
    if not latencies:
        return "none answered"
    p50, p99 = np.percentile(latencies, [50, 99])
    return f"p50 {p50:.0f} / p99 {p99:.0f} / worst {max(latencies):.0f} ms ({len(latencies)})"


async def _many_streams(server: RunningServer, grpc_streams: int, sse_streams: int) -> list[str]:
    """``grpc_streams`` gRPC streams (127.0.0.1) and ``sse_streams`` event streams (from 64
    addresses), each one request to repeat for 200 small responses read as they come, while
    another client (a process of its own) times gRPC and REST infers."""
    from ferry_client.protocol import grpc_service_pb2 as pb

    request = pb.ModelInferRequest(model_name="repeat")
    request.inputs.add(name="IN", datatype="FP32", shape=[16])
    request.inputs.add(name="COUNT", datatype="INT32", shape=[1])
    request.raw_input_contents.extend([np.ones(16, np.float32).tobytes(), np.array([200], np.int32).tobytes()])
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(server.grpc_url, options=options) for _ in range(8)]

    async def one_grpc(index: int) -> str:
        async def send():
            yield request

        call = pb_grpc.GRPCInferenceServiceStub(channels[index % len(channels)]).ModelStreamInfer(send())
        try:
            async for answer in call:
                if answer.error_message:
                    call.cancel()
                    return "refused"
                if answer.infer_response.parameters["triton_final_response"].bool_param:
                    break
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        call.cancel()
        return "OK"

    body = b'{"IN": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], "COUNT": 200}'

    async def one_sse(index: int) -> str:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.http_port, local_addr=(f"127.0.1.{1 + index % 64}", 0)
        )
        writer.write(
            b"POST /v2/models/repeat/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        status = await reader.readline()
        await reader.read()  # to the end of the stream
        writer.close()
        return "OK" if b" 200 " in status else "refused"

    spawn = multiprocessing.get_context("spawn")
    done, results = spawn.Event(), spawn.Queue()
    other = spawn.Process(target=_other_client, args=(server.grpc_url, server.http_url, done, results))
    other.start()
    started = time.monotonic()
    outcomes = [
        o if isinstance(o, str) else type(o).__name__
        for o in await asyncio.gather(
            *(one_grpc(i) for i in range(grpc_streams)),
            *(one_sse(i) for i in range(sse_streams)),
            return_exceptions=True,
        )
    ]
    took = time.monotonic() - started
    usage = _usage(server)
    done.set()
    timed, errors = results.get()
    other.join()
    for channel in channels:
        await channel.close()
    counts = ", ".join(f"{outcomes.count(o)} {o}" for o in sorted(set(outcomes)))
    return [
        f"{grpc_streams} gRPC + {sse_streams} SSE streams of 200 responses each (SSE from 64 addresses)",
        f"{counts}; {took:.0f} s",
        usage,
        f"gRPC {_percentiles(timed['gRPC'])}; gRPC, connection kept {_percentiles(timed['gRPC kept'])}; "
        f"REST infer {_percentiles(timed['REST'])}"
        + (f"; {len(errors)} errors: {sorted(set(errors))[:3]}" if errors else ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half-open", type=int, default=3000)
    parser.add_argument("--header-mb", type=int, default=8)
    parser.add_argument("--grpc-streams", type=int, default=20000)
    parser.add_argument("--typed-millions", type=int, default=16, help="millions of elements in the typed gRPC request")
    parser.add_argument("--stream-grpc", type=int, default=1500, help="decoupled gRPC streams at once (issue 38)")
    parser.add_argument("--stream-sse", type=int, default=750, help="decoupled generate_stream clients at once")
    parser.add_argument("--only-streams", action="store_true", help="only the rows of issue 38 (decoupled streams)")
    parser.add_argument("--only-many-streams", action="store_true", help="only the row of many decoupled streams")
    parser.add_argument("server_flags", nargs="*", help="after --: more flags for the streams' server")
    args = parser.parse_args()
    if args.only_streams or args.only_many_streams:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [["attack", "answer", "server while it holds", "another client's request (worst)"]]
            rows.extend(streams(tmp, args.stream_grpc, args.stream_sse, args.only_many_streams, args.server_flags))
        _print(rows)
        return
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        write_mlp_model(repo / "quick", width=WIDTH, layers=1, extra_config="dynamic_batching { }\n")
        shutil.copytree(ROOT / "model_repo" / "dynamic_shape", repo / "wide")
        config = repo / "wide" / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "dynamic_shape"', 'name: "wide"'))
        server = start_server(repo, Path(tmp) / "server.log", "--allow-shared-memory")  # off by default
        try:
            rows = [["attack", "answer", "server while it holds", "another client's request (worst)"]]
            rows.append(["(idle)", "", _usage(server), f"{asyncio.run(_grpc_latency_ms(server)):.0f} ms"])
            rows.append(asyncio.run(half_open(server, args.half_open)))
            rows.append(asyncio.run(huge_headers(server, args.header_mb)))
            rows.append(asyncio.run(grpc_streams(server, args.grpc_streams)))
            rows.extend(stalls(server, args.typed_millions))
            rows.extend(shared_memory(server))
            rows.append(["(after)", "", _usage(server), f"{asyncio.run(_grpc_latency_ms(server)):.0f} ms"])
        finally:
            server.stop()
        rows.extend(streams(tmp, args.stream_grpc, args.stream_sse))
    _print(rows)


def _print(rows: list[list[str]]) -> None:
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows[1:]:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
