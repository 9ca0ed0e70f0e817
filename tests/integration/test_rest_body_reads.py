"""A large REST body is read straight into the buffer its tensors are views of (``api/http_body_reads``):
the server's own REST stack (uvicorn with Ferry's guarded protocol, the V2 app, a real data plane and
model) in this process, so what the request path receives and what was allocated can be looked at;
clients are plain blocking sockets on other threads (they copy nothing in this process).

Hostile bodies on this path: shorter than their Content-Length (timed out), cut off mid-body, longer
(the rest is the connection's next request), pipelined behind it, and announced far larger than
what was sent (no buffer allocated ahead of it)."""

from __future__ import annotations

import asyncio
import json
import socket
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
import pytest
import uvicorn

from ferry.api import http_body_reads
from ferry.api.admission import Admission
from ferry.api.connection_limits import ConnectionGuard, HttpConnectionLimits
from ferry.api.dataplane import DataPlane
from ferry.api.http import create_http_app
from ferry.api.http_fast import InferFastPath
from ferry.repository.manager import ModelManager
from ferry.types import ControlMode, InferenceRequest

from ..conftest import MODEL_REPO

pytestmark = pytest.mark.timeout(120)

MIB = 2**20
#: ResNet-50's input, as one row of the dynamic-shape model (y = 2x + 1): a 602 KB body.
ELEMENTS = 3 * 224 * 224
BODY_GRACE_S = 1.0
WAIT = 30.0


@dataclass
class Stack:
    plane: DataPlane
    port: int
    seen: list[tuple[InferenceRequest, tuple[int, int]]]  # each request the path got, with tracemalloc then


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    manager = ModelManager(MODEL_REPO, control_mode=ControlMode.EXPLICIT, startup_models=["dynamic_shape"])
    await manager.start()
    plane = DataPlane(manager, admission=Admission(64, 64 * MIB))
    plane.started = True
    seen: list[tuple[InferenceRequest, tuple[int, int]]] = []
    served = plane.infer

    async def infer(request: InferenceRequest, door: str = "") -> object:
        seen.append((request, tracemalloc.get_traced_memory()))  # what the door made before the model ran
        return await served(request, door)

    plane.infer = infer  # type: ignore[method-assign]
    app = InferFastPath(create_http_app(plane, 16 * MIB, 16 * MIB), plane, 16 * MIB, 16 * MIB)
    guard = ConnectionGuard(HttpConnectionLimits(min_body_rate=1024, body_grace=BODY_GRACE_S))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", http=guard.protocol()))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield Stack(plane, sock.getsockname()[1], seen)
    finally:
        server.should_exit = True
        await task
        await manager.stop(5)


def _request(x: np.ndarray, content_length: int | None = None) -> tuple[bytes, bytes]:
    """The head and body of a V2 binary infer request of ``x``."""
    header = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": list(x.shape), "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}
            ],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + x.tobytes()
    head = (
        "POST /v2/models/dynamic_shape/infer HTTP/1.1\r\nHost: ferry\r\n"
        f"Content-Length: {len(body) if content_length is None else content_length}\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\n\r\n"
    ).encode()
    return head, body


def _send(port: int, *pieces: bytes, close_after: bool = False) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    for piece in pieces:
        client.sendall(piece)
    if close_after:
        client.close()
    return client


def _responses(client: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """``count`` responses (status, body) read from ``client`` (Content-Length framed)."""
    data = b""
    answers = []
    while len(answers) < count:
        while b"\r\n\r\n" not in data:
            chunk = client.recv(1 << 16)
            if not chunk:
                return answers
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length:"))
        while len(data) < length:
            chunk = client.recv(1 << 16)
            if not chunk:
                return answers
            data += chunk
        answers.append((int(lines[0].split()[1]), data[:length]))
        data = data[length:]
    return answers


def _output(answer: bytes) -> np.ndarray:
    header_end = answer.index(b"}]}") + 3
    return np.frombuffer(answer[header_end:], np.float32)


def _image() -> np.ndarray:
    return np.random.default_rng(0).random((1, ELEMENTS), dtype=np.float32)


async def test_the_tensor_is_a_view_of_the_buffer_the_body_was_read_into(stack: Stack) -> None:
    """No copy of the body before the model: the request's tensor views the memory its body was
    received into, and nothing else the size of the body was allocated on the way (before, the
    pieces, their join and uvicorn's buffer were each a copy: at least twice the body at once)."""
    x = _image()
    head, body = _request(x)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        client = await asyncio.to_thread(_send, stack.port, head, body)
        [(status, answer)] = await asyncio.to_thread(_responses, client, 1)
    finally:
        tracemalloc.stop()
    client.close()
    assert status == 200, answer[:200]
    np.testing.assert_array_equal(_output(answer), x.ravel() * 2 + 1)
    [(request, (_, peak))] = stack.seen
    received = request.received
    assert received is not None
    buffer = np.frombuffer(received.parts[0], np.uint8)  # type: ignore[attr-defined]
    assert np.shares_memory(request.inputs["x"], buffer)
    assert peak - before < 1.5 * len(body), f"{peak - before} bytes allocated for a body of {len(body)}"


async def test_the_read_of_the_head_takes_little_of_the_body_with_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body's start read with the head waits in uvicorn's buffer and is copied again into the
    body's memory: that read is capped (``HEAD_READ_BYTES``), so little of a large body is copied
    twice. The head and the body's first 96 KiB are sent while this loop (the server's) is held, so
    they are all in the socket when the server first reads; the rest is sent after."""
    copied: list[int] = []
    scatter = http_body_reads.scatter

    def counted(parts: tuple[memoryview, ...], filled: int, data: bytes | bytearray | memoryview) -> int:
        copied.append(len(data))
        return scatter(parts, filled, data)

    monkeypatch.setattr(http_body_reads, "scatter", counted)
    x = _image()
    head, body = _request(x)
    start = 96 * 1024
    client = _send(stack.port, head, body[:start])  # on this loop's thread: the server reads after
    await asyncio.to_thread(client.sendall, body[start:])
    [(status, answer)] = await asyncio.to_thread(_responses, client, 1)
    client.close()
    assert status == 200, answer[:200]
    np.testing.assert_array_equal(_output(answer), x.ravel() * 2 + 1)
    assert copied and copied[0] <= http_body_reads.HEAD_READ_BYTES - len(head), copied


async def test_a_head_longer_than_one_head_read_is_parsed_across_reads(stack: Stack) -> None:
    """A head of 40 KiB (within the 64 KiB limit) takes three head reads; the body after it still goes
    straight into its buffer, and the connection's next request starts with a head read again."""
    x = _image()
    head, body = _request(x)
    padded = head.replace(b"Host: ferry\r\n", b"Host: ferry\r\nX-Padding: " + b"p" * 40 * 1024 + b"\r\n")
    assert len(padded) > 2 * http_body_reads.HEAD_READ_BYTES
    client = await asyncio.to_thread(_send, stack.port, padded, body, head, body)
    answers = await asyncio.to_thread(_responses, client, 2)
    client.close()
    assert [status for status, _ in answers] == [200, 200]
    for _, answer in answers:
        np.testing.assert_array_equal(_output(answer), x.ravel() * 2 + 1)
    for request, _ in stack.seen:
        buffer = np.frombuffer(request.received.parts[0], np.uint8)  # type: ignore[union-attr]
        assert np.shares_memory(request.inputs["x"], buffer)


async def test_a_request_pipelined_behind_a_body_is_parsed_from_its_first_byte(stack: Stack) -> None:
    """The body's bytes never went through the parser: the next request on the connection starts
    where the body ended (a fresh parser), whether it came in the same write or after."""
    x = _image()
    head, body = _request(x)
    client = await asyncio.to_thread(_send, stack.port, head + body + head + body)
    answers = await asyncio.to_thread(_responses, client, 2)
    await asyncio.to_thread(client.sendall, head + body)
    answers += await asyncio.to_thread(_responses, client, 1)
    client.close()
    assert [status for status, _ in answers] == [200, 200, 200]
    for _, answer in answers:
        np.testing.assert_array_equal(_output(answer), x.ravel() * 2 + 1)


async def test_a_body_longer_than_its_content_length_ends_there(stack: Stack) -> None:
    """What follows the declared length is the connection's next request, here not HTTP: 400 and
    the connection closed (uvicorn's answer, whether or not the first was answered by then); the
    model, if the first reached it, saw exactly the declared bytes."""
    x = _image()
    head, body = _request(x)
    client = await asyncio.to_thread(_send, stack.port, head, body, b"GARBAGE NOT HTTP\r\n\r\n")
    answers = await asyncio.to_thread(_responses, client, 2)
    client.close()
    assert answers[-1][0] == 400
    for status, answer in answers[:-1]:
        assert status == 200
        np.testing.assert_array_equal(_output(answer), x.ravel() * 2 + 1)
    for request, _ in stack.seen:
        np.testing.assert_array_equal(request.inputs["x"], x)


async def _admission_settles(plane: DataPlane) -> None:
    for _ in range(int(WAIT / 0.01)):
        if plane.admission.requests == 0 and plane.admission.bytes == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"admission still holds {plane.admission.bytes} bytes")


async def test_a_body_shorter_than_its_content_length_is_timed_out_and_gives_its_bytes_back(stack: Stack) -> None:
    x = _image()
    head, body = _request(x)
    # 2 KB of 602: the buffer is allocated (within DIRECT_AHEAD_BYTES), then the client stalls
    client = await asyncio.to_thread(_send, stack.port, head, body[:2048])
    for _ in range(int(WAIT / 0.01)):  # admitted, its buffer counted (the whole body, before it is paid)
        if stack.plane.admission.bytes >= len(body):
            break
        await asyncio.sleep(0.01)
    assert stack.plane.admission.bytes >= len(body)
    answer = await asyncio.to_thread(client.recv, 1 << 16)
    client.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert b"request body arrived slower than 1024 bytes/s" in answer
    await _admission_settles(stack.plane)
    assert not stack.seen  # never reached the model


async def test_a_client_that_leaves_mid_body_frees_everything_and_others_are_served(stack: Stack) -> None:
    x = _image()
    head, body = _request(x)
    await asyncio.to_thread(_send, stack.port, head, body[: len(body) // 3], close_after=True)
    await _admission_settles(stack.plane)
    client = await asyncio.to_thread(_send, stack.port, head, body)
    [(status, answer)] = await asyncio.to_thread(_responses, client, 1)
    client.close()
    assert status == 200
    np.testing.assert_array_equal(_output(answer), x.ravel() * 2 + 1)


async def test_a_body_announced_far_larger_than_sent_is_not_allocated_ahead(stack: Stack) -> None:
    """A client announcing 8 MiB and sending 100 KB holds what it sent (the usual read), not a buffer
    of what it announced (``DIRECT_AHEAD_BYTES``)."""
    x = _image()
    head, body = _request(x, content_length=8 * MIB)
    client = await asyncio.to_thread(_send, stack.port, head, body[: 100 * 1024])
    for _ in range(int(WAIT / 0.01)):
        if stack.plane.admission.requests == 1 and stack.plane.admission.bytes > 0:
            break
        await asyncio.sleep(0.01)
    assert 0 < stack.plane.admission.bytes < MIB
    client.close()
    await _admission_settles(stack.plane)
