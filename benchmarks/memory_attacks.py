"""What one client can make the server hold: the RSS growth of a burst of each memory attack of
issue 24, against a server with the DEFAULT limits (or the flags given after ``--``).

Run (a few minutes on two cores)::

    python benchmarks/memory_attacks.py [--intake-processes 2] [--only typed,images] [-- --max-inflight-bytes ...]

For each attack, on a fresh server: the answers (status counts), the server's RSS before the burst,
its peak while the burst runs (sampled every 20 ms by another process, which also runs the other
client, so that the attack's threads delay neither; with intake processes, the sum of every
process's proportional set size, so shared arenas count once) and after, and the p99 latency of
another client sending small requests one after another during the burst. The goal the defaults
are chosen for: no attack raises the peak by more than 500 MB. Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gzip
import io
import json
import multiprocessing
import queue
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ferry.settings import Settings  # noqa: E402
from ferry_client.codec import HEADER_LENGTH  # noqa: E402
from ferry_client.protocol import grpc_service_pb2 as pb  # noqa: E402
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.conftest import RunningServer, start_server  # noqa: E402

MB = 1_000_000


def _rss(pid: int) -> int:
    """The server's memory: its process and every process it started (intakes), each counted by its
    proportional set size, so the shared-memory arenas mapped in two processes count once."""
    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
    if len(processes) == 1:
        return root.memory_info().rss
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += process.memory_full_info().pss
    return total


def _other_client(url: str, done: threading.Event, latencies: list[float], failures: list[str]) -> None:
    """Another client: one small REST inference after another (16 floats) until ``done``."""
    head = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}]}
    ).encode()
    body = head + np.ones(16, np.float32).tobytes()
    headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))}
    while not done.is_set():
        started = time.perf_counter()
        status = _post(url, body, headers)
        if status == "200":
            latencies.append(time.perf_counter() - started)
        else:
            failures.append(status)
        time.sleep(0.01)


def _observe(pid: int, url: str, started: Any, done: Any, results: Any) -> None:
    """The observer process: samples the server's memory every 20 ms and runs the other client
    until ``done``, then puts (peak, latencies, failures) in ``results``. A process of its own, so
    the attack's threads (which serialise large messages under this interpreter's GIL) delay
    neither a sample nor the other client's requests."""
    stop = threading.Event()
    latencies: list[float] = []
    failures: list[str] = []
    peak = _rss(pid)
    other = threading.Thread(target=_other_client, args=(url, stop, latencies, failures))
    other.start()
    started.set()
    while not done.is_set():
        peak = max(peak, _rss(pid))
        time.sleep(0.02)
    stop.set()
    other.join()
    results.put((peak, latencies, failures))


def measure(server: RunningServer, burst: Callable[[], list[str]]) -> tuple[list[str], int, int, int, str]:
    """Run ``burst`` while another process samples the server's RSS and times another client:
    (answers, before, peak, after in bytes, the other client's p99 and failures)."""
    pid = server.process.pid
    time.sleep(0.5)
    before = _rss(pid)
    spawn = multiprocessing.get_context("spawn")
    started, done, results = spawn.Event(), spawn.Event(), spawn.Queue()
    url = f"http://{server.http_url}/v2/models/wide/infer"
    observer = spawn.Process(target=_observe, args=(pid, url, started, done, results))
    observer.start()
    started.wait()
    try:
        answers = burst()
    finally:
        done.set()
        peak, latencies, failures = results.get()
        observer.join()
    time.sleep(0.5)
    peak = max(peak, before)
    p99 = f"{np.percentile(latencies, 99) * 1000:.0f} ms ({len(latencies)} ok" if latencies else "- (0 ok"
    other = p99 + (f", {len(failures)} failed: {sorted(set(failures))})" if failures else ")")
    return answers, before, peak, _rss(pid), other


def _post(url: str, body: bytes, headers: dict[str, str]) -> str:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()
            return str(response.status)
    except urllib.error.HTTPError as error:
        print(f"  {error.code}: {error.read()[:300].decode(errors='replace')}", file=sys.stderr, flush=True)
        return str(error.code)
    except OSError as error:
        return type(error).__name__


def _at_once(count: int, one: Callable[[], str]) -> list[str]:
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: one(), range(count)))


def _grpc_infer(server: RunningServer, request: pb.ModelInferRequest) -> str:
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_url, options=options) as channel:
        try:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=300)
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name


def typed(server: RunningServer, count: int = 4, mib: int = 30) -> list[str]:
    """``count`` gRPC requests at once, each ``mib`` MiB of fp32_contents (not raw contents)."""
    n = mib * 2**20 // 4
    request = pb.ModelInferRequest(model_name="wide")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, n])
    tensor.contents.fp32_contents.extend(np.ones(n, np.float32))
    return _at_once(count, lambda: _grpc_infer(server, request))


def _wide_request(mib: int) -> pb.ModelInferRequest:
    n = mib * 2**20 // 4
    request = pb.ModelInferRequest(model_name="wide")
    request.inputs.add(name="x", datatype="FP32", shape=[1, n])
    request.raw_input_contents.append(np.ones(n, np.float32).tobytes())
    return request


def _grpc_client(url: str, streamed: bool, mib: int, barrier: Any, answers: Any) -> None:
    """One attacking client process: builds its request, connects, waits at the barrier twice (all
    ready; then go), then sends it (unary or in a stream) and puts how it was answered in ``answers``."""
    request = _wide_request(mib)
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(url, options=options) as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        barrier.wait()  # ready
        barrier.wait()  # go
        try:
            if not streamed:
                stub.ModelInfer(request, timeout=300)
                answers.put("OK")
                return
            for answer in stub.ModelStreamInfer(iter([request]), timeout=300):
                answers.put("error in stream" if answer.error_message else "OK")
                return
            answers.put("no answer")
        except grpc.RpcError as exc:
            answers.put(exc.code().name)


def _grpc_burst(
    server: RunningServer, count: int, mib: int, streamed: bool, urls: list[str] | None = None
) -> Callable[[], list[str]]:
    """Starts ``count`` client processes (one connection each, to ``urls`` in turn: the server's
    own by default), waits until each has built its request and connected (so that their start-up,
    seconds of CPU on two cores, is not measured as the attack) and returns the burst: releasing
    them at once. Processes, not threads: threads serialise their sends under one interpreter, so
    the messages arrived one after another and the burst measured half of what it can reach."""
    spawn = multiprocessing.get_context("spawn")
    barrier, answers = spawn.Barrier(count + 1), spawn.Queue()
    urls = urls or [server.grpc_url]
    clients = [
        spawn.Process(target=_grpc_client, args=(urls[index % len(urls)], streamed, mib, barrier, answers))
        for index in range(count)
    ]
    for client in clients:
        client.start()
    barrier.wait(timeout=300)

    def burst() -> list[str]:
        barrier.wait(timeout=120)
        results = [answers.get(timeout=600) for _ in clients]
        for client in clients:
            client.join()
        return results

    return burst


#: MiB of raw contents in each gRPC attack message: the largest the server's
#: --grpc-max-message-bytes allows (one MiB below it, for the request's other fields); set by main.
MESSAGE_MIB = Settings.model_fields["grpc_max_message_bytes"].default // 2**20 - 1


def grpc_raw(server: RunningServer, count: int = 16) -> Callable[[], list[str]]:
    """``count`` gRPC requests at once, each the largest message the server accepts (raw
    contents): grpc holds each message whole before admission sees it."""
    return _grpc_burst(server, count, MESSAGE_MIB, streamed=False)


def grpc_streams(server: RunningServer, count: int = 16) -> Callable[[], list[str]]:
    """``count`` ModelStreamInfer streams at once, each sending one request as large as the server
    accepts: each open stream that asks for its message may receive it whole before admission
    sees it (streams take turns: see docs/reliability.md)."""
    return _grpc_burst(server, count, MESSAGE_MIB, streamed=True)


#: 16 loopback addresses besides 127.0.0.1 (any local user has 127.0.0.0/8).
ADDRESSES = [f"127.0.0.{10 + index}" for index in range(16)]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes one way, at the pace the far side takes them (so the server's flow control holds)."""
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


def _relays(port: int, sources: list[str]) -> list[str]:
    """Local addresses whose connections reach ``port`` from each of ``sources``: grpcio cannot
    choose its source address, so a relay per address (in this process, whose memory is not the
    server's) connects from it."""
    ready: queue.Queue[list[str]] = queue.Queue()

    async def serve() -> None:
        urls = []
        for source in sources:

            async def relay(reader: Any, writer: Any, source: str = source) -> None:
                upstream_reader, upstream_writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=(source, 0)
                )
                await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

            listener = await asyncio.start_server(relay, "127.0.0.1", 0)
            urls.append(f"127.0.0.1:{listener.sockets[0].getsockname()[1]}")
        ready.put(urls)
        await asyncio.Event().wait()  # relays until the benchmark exits

    threading.Thread(target=asyncio.run, args=(serve(),), daemon=True).start()
    return ready.get(timeout=30)


def grpc_addresses(
    server: RunningServer, per_address: int = 2, addresses: list[str] = ADDRESSES
) -> Callable[[], list[str]]:
    """``per_address`` gRPC calls of the largest message the server accepts from each of
    ``addresses`` (16 loopback addresses) at once."""
    urls = _relays(server.grpc_port, addresses)
    return _grpc_burst(server, per_address * len(urls), MESSAGE_MIB, streamed=False, urls=urls)


def big_tensors(server: RunningServer, count: int = 24, mib: int = 64) -> list[str]:
    """``count`` REST binary requests at once, each a ``mib`` MiB FP32 tensor, answered binary."""
    n = mib * 2**20 // 4
    head = json.dumps(
        {
            "inputs": [{"name": "x", "shape": [1, n], "datatype": "FP32", "parameters": {"binary_data_size": 4 * n}}],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = head + np.ones(n, np.float32).tobytes()
    headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))}
    url = f"http://{server.http_url}/v2/models/wide/infer"
    return _at_once(count, lambda: _post(url, body, headers))


def json_answers(server: RunningServer, count: int = 3, millions: int = 4) -> list[str]:
    """``count`` binary requests at once asking for their ``millions`` M-number answers as JSON."""
    n = millions * 1_000_000
    head = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, n], "datatype": "FP32", "parameters": {"binary_data_size": 4 * n}}]}
    ).encode()
    body = head + np.ones(n, np.float32).tobytes()
    headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))}
    url = f"http://{server.http_url}/v2/models/wide/infer"
    return _at_once(count, lambda: _post(url, body, headers))


def gzip_bodies(server: RunningServer, count: int = 6, mib: int = 200) -> list[str]:
    """``count`` small gzip bodies at once, each inflating to a ``mib`` MiB binary tensor request."""
    n = mib * 2**20 // 4
    head = json.dumps(
        {
            "inputs": [{"name": "x", "shape": [1, n], "datatype": "FP32", "parameters": {"binary_data_size": 4 * n}}],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        }
    ).encode()
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = compressor.compress(head) + b"".join(compressor.compress(bytes(2**20)) for _ in range(mib))
    body += compressor.flush()
    headers = {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip", HEADER_LENGTH: str(len(head))}
    url = f"http://{server.http_url}/v2/models/wide/infer"
    return _at_once(count, lambda: _post(url, body, headers))


def _png(side: int, mode: str) -> bytes:
    out = io.BytesIO()
    Image.new(mode, (side, side), 200).save(out, format="PNG")
    return out.getvalue()


def images(server: RunningServer, count: int = 6, side: int = 6000, mode: str = "RGB") -> list[str]:
    """``count`` /classify requests at once, each one ``side`` x ``side`` PNG (36 MP at 6000)."""
    body = _png(side, mode)
    url = f"http://{server.http_url}/v2/models/digits/classify"
    return _at_once(count, lambda: _post(url, body, {"Content-Type": "image/png"}))


def multipart(server: RunningServer, count: int = 4, files: int = 64, side: int = 1000) -> list[str]:
    """``count`` multipart /classify uploads at once, each ``files`` 1-MP PNGs (noisy: ~3 MB each)."""
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (side, side, 3), np.uint8)).save(out, format="PNG")
    png = out.getvalue()
    boundary = "ferryboundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="images"; filename="{i}.png"\r\n'
        f"Content-Type: image/png\r\n\r\n".encode()
        + png
        + b"\r\n"
        for i in range(files)
    ]
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    url = f"http://{server.http_url}/v2/models/digits/classify"
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return _at_once(count, lambda: _post(url, body, headers))


def _encoded(image: Image.Image, format: str, **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, format=format, **options)
    return out.getvalue()


def _one(server: RunningServer, path: str, body: bytes, count: int = 1) -> list[str]:
    """``count`` POSTs of ``body`` to ``path`` at once (one: the issue's single small requests)."""
    return _at_once(count, lambda: _post(f"http://{server.http_url}{path}", body, {"Content-Type": "image/png"}))


def ocr_noise(server: RunningServer) -> list[str]:
    """A 39.7-MP page of grey noise (7700 x 5160, PNG) to /ocr."""
    noise = np.random.default_rng(0).integers(0, 256, (5160, 7700), np.uint8)
    return _one(server, "/v2/models/ocr/ocr", _encoded(Image.fromarray(noise), "PNG", compress_level=1))


def ocr_words(server: RunningServer) -> list[str]:
    """A 2000 x 2000 page of 1,540 words (35 lines of 44) to /ocr."""
    page = Image.new("RGB", (2000, 2000), "white")
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=16)
    for line in range(35):
        draw.text((10, 20 + 56 * line), " ".join(f"w{line}x{word}" for word in range(44)), fill="black", font=font)
    return _one(server, "/v2/models/ocr/ocr", _encoded(page, "PNG"))


def ocr_8mp(server: RunningServer) -> list[str]:
    """A 500 x 6000 page: shrunk to 160 x 1984, then enlarged to a 736 x 9120 detector input
    (6.7 MP, within max_detector_pixels: ONNX Runtime holds ~1.1 GB running it)."""
    page = Image.new("RGB", (500, 6000), "white")
    return _one(server, "/v2/models/ocr/ocr", _encoded(page, "PNG"))


def ocr_thin(server: RunningServer) -> list[str]:
    """An 8 x 2000 white PNG to /ocr."""
    return _one(server, "/v2/models/ocr/ocr", _encoded(Image.new("RGB", (8, 2000), "white"), "PNG"))


def thin_classify(server: RunningServer) -> list[str]:
    """A 1 x 4000 PNG (93 bytes) to /classify on document_orientation (shorter side to 256)."""
    thin = _encoded(Image.new("RGB", (1, 4000), (90, 90, 90)), "PNG")
    return _one(server, "/v2/models/document_orientation/classify", thin)


def thin_embed(server: RunningServer) -> list[str]:
    """A 1 x 30000 PNG to /embed on document_orientation's embedding twin."""
    thin = _encoded(Image.new("RGB", (1, 30000), (90, 90, 90)), "PNG")
    return _one(server, "/v2/models/orientation_embed/embed", thin)


def webp(server: RunningServer) -> list[str]:
    """A 39-MP lossless WebP of one colour (7650 x 5100, a few kB) to /classify."""
    image = _encoded(Image.new("RGB", (7650, 5100), (10, 200, 30)), "WEBP", lossless=True)
    return _one(server, "/v2/models/document_orientation/classify", image)


def _gzip_tensor(server: RunningServer, model: str, output: str, shape: list[int]) -> list[str]:
    """A V2 infer of zeros of ``shape`` (FP32, binary), gzipped: a fraction of a MB on the wire."""
    data = np.zeros(shape, dtype=np.float32).tobytes()
    head = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": shape, "datatype": "FP32", "parameters": {"binary_data_size": len(data)}}
            ],
            "outputs": [{"name": output, "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = gzip.compress(head + data, compresslevel=6)
    headers = {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip", HEADER_LENGTH: str(len(head))}
    return [_post(f"http://{server.http_url}/v2/models/{model}/infer", body, headers)]


def mixed(server: RunningServer) -> Callable[[], list[str]]:
    """Issue 38 item 8's mixed burst within the defaults, all at once against one server: the
    ``tensors``, ``images`` and ``gzip`` bursts and 8 loopback addresses x 2 gRPC calls of the
    largest message accepted (its client processes made ready first, as ``grpc_addresses``'s)."""
    parts = {
        "gRPC": grpc_addresses(server, addresses=ADDRESSES[:8]),
        "tensors": lambda: big_tensors(server),
        "images": lambda: images(server),
        "gzip": lambda: gzip_bodies(server),
    }

    def burst() -> list[str]:
        with ThreadPoolExecutor(len(parts)) as pool:
            answered = pool.map(lambda part: part(), parts.values())
            return [f"{name} {answer}" for name, answers in zip(parts, answered, strict=True) for answer in answers]

    return burst


#: Attacks that return their burst, clients ready (made ready before the measurement starts).
PREPARED = frozenset({"grpc_raw", "grpc_streams", "grpc_addresses", "mixed"})

ATTACKS: dict[str, tuple[str, Callable[[RunningServer], Any]]] = {
    "typed": ("4 x gRPC fp32_contents of 30 MiB", typed),
    "grpc_raw": ("16 x gRPC raw contents of {mib} MiB (16 client processes)", grpc_raw),
    "grpc_streams": ("16 x ModelStreamInfer streams, one {mib} MiB message each (16 client processes)", grpc_streams),
    "tensors": ("24 x 64 MiB binary FP32 tensors (REST)", big_tensors),
    "json": ("3 x 16 MB binary asking for 4M numbers as JSON", json_answers),
    "gzip": ("6 x gzip bodies inflating to 200 MiB", gzip_bodies),
    "images": ("6 x 36-MP RGB PNG to /classify", images),
    "images16": ("6 x 36-MP 16-bit grey PNG to /classify", lambda s: images(s, mode="I;16")),
    "multipart": ("4 x multipart of 64 noisy 1-MP PNGs", multipart),
    # issue 38
    "grpc_addresses": ("16 addresses x 2 gRPC calls of {mib} MiB (32 client processes)", grpc_addresses),
    "ocr_noise": ("39.7-MP noise page (PNG) to /ocr", ocr_noise),
    "ocr_words": ("2000 x 2000 page of 1,540 words to /ocr", ocr_words),
    "ocr_8mp": ("500 x 6000 page to /ocr (6.7-MP detector input)", ocr_8mp),
    "detector_gzip": (
        "text_detector [1,3,2048,2048] from a gzip body",
        lambda s: _gzip_tensor(s, "text_detector", "sigmoid_0.tmp_0", [1, 3, 2048, 2048]),
    ),
    "detector_1184": (
        "text_detector [1,3,1152,1152] from a gzip body (within max_variable_elements)",
        lambda s: _gzip_tensor(s, "text_detector", "sigmoid_0.tmp_0", [1, 3, 1152, 1152]),
    ),
    "recognizer_wide": (
        "text_recognizer [1,3,48,40000] from a gzip body",
        lambda s: _gzip_tensor(s, "text_recognizer", "softmax_11.tmp_0", [1, 3, 48, 40000]),
    ),
    "thin_classify": ("1 x 4000 PNG to /classify", thin_classify),
    "thin_embed": ("1 x 30000 PNG to /embed", thin_embed),
    "ocr_thin": ("8 x 2000 white PNG to /ocr", ocr_thin),
    "webp": ("39-MP lossless WebP to /classify", webp),
    "mixed": (
        "at once: 24 x 64 MiB REST tensors, 6 x 36-MP PNG, 6 x gzip to 200 MiB, 8 addresses x 2 gRPC of {mib} MiB",
        mixed,
    ),
}


def _message_mib(flags: list[str]) -> int:
    """The attack messages' MiB: one below the --grpc-max-message-bytes among the server ``flags``
    (its default if not given), so that an attack sends the largest message the server accepts."""
    limit = Settings.model_fields["grpc_max_message_bytes"].default
    for index, flag in enumerate(flags):
        if flag == "--grpc-max-message-bytes":
            limit = int(flags[index + 1])
        elif flag.startswith("--grpc-max-message-bytes="):
            limit = int(flag.split("=", 1)[1])
    return limit // 2**20 - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intake-processes", type=int, default=1)
    parser.add_argument("--only", default=",".join(ATTACKS), help="comma-separated: " + ",".join(ATTACKS))
    parser.add_argument("flags", nargs="*", help="more server flags (after --)")
    args = parser.parse_args()
    global MESSAGE_MIB
    MESSAGE_MIB = _message_mib(args.flags)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        shutil.copytree(ROOT / "model_repo" / "dynamic_shape", repo / "wide")
        config = repo / "wide" / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "dynamic_shape"', 'name: "wide"'))
        shutil.copytree(ROOT / "model_repo" / "digits", repo / "digits")
        for model in ("document_orientation", "text_detector", "text_angle", "text_recognizer", "ocr"):
            shutil.copytree(ROOT / "model_repo" / model, repo / model)
        embed = repo / "orientation_embed"  # document_orientation's preprocessing, its outputs as vectors
        shutil.copytree(ROOT / "model_repo" / "document_orientation", embed)
        text = (embed / "config.pbtxt").read_text().replace('name: "document_orientation"', 'name: "orientation_embed"')
        text = text[: text.index("  classification {")] + "  embedding { }\n}\n"
        (embed / "config.pbtxt").write_text(text)
        flags = ["--intake-processes", str(args.intake_processes), *args.flags]
        rows = []
        for key in args.only.split(","):
            title, attack = ATTACKS[key]
            title = title.format(mib=MESSAGE_MIB)
            server = start_server(repo, Path(tmp) / f"{key}.log", *flags)  # a fresh server per attack
            try:
                prepared = attack(server) if key in PREPARED else None
                burst = prepared or (lambda attack=attack, server=server: attack(server))
                answers, before, peak, after, other = measure(server, burst)
            finally:
                server.stop()
            counted = ", ".join(f"{n} x {a}" for a, n in sorted(collections.Counter(answers).items()))
            grew, kept = (peak - before) / MB, (after - before) / MB
            rows.append([title, counted, f"{before / MB:.0f}", f"+{grew:.0f}", f"{kept:+.0f}", other])
            print(" | ".join(rows[-1]), flush=True)
    print(f"\nintake processes: {args.intake_processes}; flags: {' '.join(args.flags) or '(defaults)'}")
    print("| attack (burst) | answers | RSS before (MB) | peak | after | another client's p99 |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
