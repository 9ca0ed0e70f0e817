"""Clients that never read their answers (issue 24): the unread answer counts against
``--max-inflight-bytes`` for as long as the server holds it, and a reader that stalls is cut once
the grace period has passed, which frees it.

The attack is real: a raw socket with a 4 KiB receive buffer sends a request whose binary answer is
8 MiB and then never reads. The server's own metrics show the bytes held while it stalls.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from ferry_client.codec import HEADER_LENGTH

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model
from ..server_metrics import metric, scrape

pytestmark = pytest.mark.timeout(120)

WIDTH = 1024
ROWS = 2048  # 8 MiB each way
GRACE_S = 3
ANSWER = ROWS * WIDTH * 4
#: The model the never-reading clients call: it answers neither until both have sent their request, so
#: their answers (and the grace each is given to be read) begin together, however long the test took
#: to send the second one.
PAIRED = "paired"


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def readers(request, tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_readers") / "models"
    write_mlp_model(repo / "quick", width=WIDTH, layers=1, max_batch_size=ROWS)
    write_mlp_model(
        repo / PAIRED,
        width=WIDTH,
        layers=1,
        max_batch_size=2 * ROWS,
        extra_config=f"dynamic_batching {{ preferred_batch_size: [ {2 * ROWS} ] "
        "max_queue_delay_microseconds: 600000000 }\n",
    )
    extra = ["--intake-processes", "2"] if request.param == "2 intake processes" else []
    running = start_server(
        repo,
        repo.parent / "server.log",
        "--http-min-body-rate",
        "1024",
        "--http-body-grace-secs",
        str(GRACE_S),
        *extra,
    )
    yield running
    running.stop()


def _never_reading_client(server: RunningServer) -> socket.socket:
    x = np.ones((ROWS, WIDTH), np.float32)
    header = (
        b'{"inputs":[{"name":"x","shape":[%d,%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}],'
        b'"outputs":[{"name":"y","parameters":{"binary_data":true}}]}' % (ROWS, WIDTH, x.nbytes)
    )
    body = header + x.tobytes()
    head = (
        f"POST /v2/models/{PAIRED}/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
        f"{HEADER_LENGTH}: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.connect(("127.0.0.1", server.http_port))
    sock.sendall(head + body)
    return sock  # and never read from it


def _wait(server: RunningServer, name: str, condition, timeout: float) -> str:
    """The first scrape in which ``name`` meets ``condition``: what else a test reads of that state
    comes from the same scrape (the state lasts only until the grace has passed)."""
    deadline = time.monotonic() + timeout
    while True:
        text = scrape(server)
        value = metric(text, name)
        if condition(value):
            return text
        assert time.monotonic() < deadline, f"{name} stayed at {value}"
        time.sleep(0.05)


def test_unread_answers_are_counted_then_cut(readers) -> None:
    sockets = [_never_reading_client(readers) for _ in range(2)]
    try:
        # the attack state: both answers built and stuck; admission holds their bytes
        # (each request holds its body and its answer: both answers are built once 4 x 8 MiB are held)
        text = _wait(readers, "ferry_inflight_bytes", lambda v: v >= 4 * ANSWER, timeout=30)
        held = metric(text, "ferry_inflight_bytes")
        assert metric(text, "ferry_inflight_requests") == 2
        client = triton_grpc.InferenceServerClient(readers.grpc_url)  # others are served meanwhile
        x = np.ones((1, WIDTH), np.float32)
        inputs = [triton_grpc.InferInput("x", [1, WIDTH], "FP32")]
        inputs[0].set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("quick", inputs).as_numpy("y"), x)
        # cut once behind 1 KiB/s after the grace: the bytes are released
        _wait(readers, "ferry_inflight_bytes", lambda v: v == 0, timeout=GRACE_S + 30)
        assert readers.log().count("the response was read slower than 1024 bytes/s") >= 2, held
    finally:
        for sock in sockets:
            sock.close()
