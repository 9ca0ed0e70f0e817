"""What a request really holds (issue 24): admission counts each stage's peak, not only the bytes
received: images' decoded pixels (from their headers, before anything is decoded), multipart
bodies and the files copied out of them, bodies as they inflate, every copy of a binary answer
until it is written, and a typed gRPC request's message, the bytes it came in and its array.

Each attack is a request whose real cost passes the in-flight cap (64 MiB here) while what it sends
does not: it used to be admitted (a lone request was never refused) and paid in full; now it gets
413 / RESOURCE_EXHAUSTED naming ``--max-inflight-bytes`` before the cost is paid (nothing decoded,
nothing encoded), and the same request a little smaller is answered. One process: the stages
counted here run in the model process or in each intake's copy of the same code. Every test runs
against one process and two intake processes; with intakes, the hand-off's own copies (the request
block in the intake's arena, the answer's block in the model process's) are counted too, and an
arena gives its pages back once a large request is answered.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator

import grpc
import numpy as np
import psutil
import pytest
from PIL import Image

from ferry.intake.handoff import KEEP_RESIDENT
from ferry_client.codec import HEADER_LENGTH
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import MODEL_REPO, RunningServer, start_server
from ..server_metrics import metric, scrape

pytestmark = pytest.mark.timeout(120)

MIB = 2**20
CAP = 64 * MIB
CAP_NAMED = "--max-inflight-bytes"


@pytest.fixture(scope="module", params=["one process", "intake processes"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_memory") / "models"
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    shutil.copytree(MODEL_REPO / "dynamic_shape", repo / "wide")
    config = repo / "wide" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "dynamic_shape"', 'name: "wide"'))
    running = start_server(
        repo,
        repo.parent / "server.log",
        *("--max-inflight-bytes", str(CAP), "--http-max-body-bytes", str(256 * MIB)),
        *("--intake-processes", "2" if request.param == "intake processes" else "1"),
    )
    yield running
    running.stop()


def _post(server: RunningServer, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def _png(side: int, mode: str) -> bytes:
    out = io.BytesIO()
    Image.new(mode, (side, side), 200).save(out, format="PNG")
    return out.getvalue()


def _refused_for_the_cap(status: int, text: str) -> None:
    assert status == 413, text
    assert CAP_NAMED in text and "needs" in text, text


def _decoded(server: RunningServer) -> float:
    return metric(scrape(server), "ferry_image_decoded_total")


def test_an_image_costing_more_than_the_cap_is_refused_before_it_is_decoded(server) -> None:
    # a 16-bit grey 4000 x 4000 PNG: 0.1 MB sent, 16 MP decoded as 16 bits, reduced, made RGB, pre-processed
    bomb = _png(4000, "I;16")
    assert len(bomb) < MIB
    decoded = _decoded(server)
    status, text = _post(server, "/v2/models/digits/classify", bomb, {"Content-Type": "image/png"})
    _refused_for_the_cap(status, text)
    assert _decoded(server) == decoded  # refused from the header: nothing was decoded
    status, text = _post(server, "/v2/models/digits/classify", _png(1000, "I;16"), {"Content-Type": "image/png"})
    assert status == 200, text  # 1 MP of the same kind fits


def test_multipart_uploads_are_counted_with_the_files_copied_out_of_them(server) -> None:
    noisy = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (1000, 1000), np.uint8)).save(noisy, format="PNG")
    png = noisy.getvalue()  # ~1 MB that does not compress

    def form(files: int) -> tuple[bytes, dict[str, str]]:
        part = (
            b'--b\r\nContent-Disposition: form-data; name="images"; filename="x.png"\r\n'
            b"Content-Type: image/png\r\n\r\n" + png + b"\r\n"
        )
        return part * files + b"--b--\r\n", {"Content-Type": "multipart/form-data; boundary=b"}

    # 40 files: the body (40 MB) and the files (40 MB) pass the 64 MiB cap together
    status, text = _post(server, "/v2/models/digits/classify", *form(40))
    _refused_for_the_cap(status, text)
    status, text = _post(server, "/v2/models/digits/classify", *form(4))
    assert status == 200 and len(json.loads(text)["results"]) == 4, text


def test_a_gzip_body_is_counted_as_it_inflates(server) -> None:
    n = 25 * MIB  # 100 MiB of FP32 zeros: a 0.1 MB body
    head = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, n], "datatype": "FP32", "parameters": {"binary_data_size": 4 * n}}]}
    ).encode()
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = compressor.compress(head) + b"".join(compressor.compress(bytes(MIB)) for _ in range(100))
    body += compressor.flush()
    headers = {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip", HEADER_LENGTH: str(len(head))}
    status, text = _post(server, "/v2/models/wide/infer", body, headers)
    _refused_for_the_cap(status, text)  # within the 256 MiB body limit, past the cap while inflating


def _binary_request(n: int) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(
        {
            "inputs": [{"name": "x", "shape": [1, n], "datatype": "FP32", "parameters": {"binary_data_size": 4 * n}}],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return head + np.ones(n, np.float32).tobytes(), {
        "Content-Type": "application/octet-stream",
        HEADER_LENGTH: str(len(head)),
    }


def test_binary_answers_count_every_copy_until_written(server) -> None:
    # 24 MiB in, 24 MiB out: the body, the output array and the encoded answer pass the cap
    status, text = _post(server, "/v2/models/wide/infer", *_binary_request(6 * MIB))
    _refused_for_the_cap(status, text)
    status, text = _post(server, "/v2/models/wide/infer", *_binary_request(4 * MIB))
    assert status == 200, text


def _typed(n: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="wide")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, n])
    tensor.contents.fp32_contents.extend(np.ones(n, np.float32).tolist())
    return request


def test_typed_grpc_contents_count_the_message_its_bytes_and_the_array(server) -> None:
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_url, options=options) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        # 12 MiB typed: the message and its bytes (24), the array (12), the answer three times (36)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(_typed(3 * MIB), timeout=60)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert CAP_NAMED in (refused.value.details() or "")
        answer = stub.ModelInfer(_typed(2 * MIB), timeout=60)
        assert np.frombuffer(answer.raw_output_contents[0], np.float32)[:3].tolist() == [3.0, 3.0, 3.0]


def _arenas_resident(server: RunningServer) -> dict[str, int]:
    """Bytes each hand-off arena (a memfd, seen through every process that holds it) keeps in memory."""
    resident = {}
    root = psutil.Process(server.process.pid)
    for process in [root, *root.children()]:
        for fd in os.listdir(f"/proc/{process.pid}/fd"):
            path = f"/proc/{process.pid}/fd/{fd}"
            with contextlib.suppress(OSError):
                target = os.readlink(path)
                if target.startswith(("/memfd:ferry-requests", "/memfd:ferry-responses")) and "spill" not in target:
                    resident[f"{process.pid} {target}"] = os.stat(path).st_blocks * 512
    return resident


def _counted_bytes(server: RunningServer) -> float:
    return metric(scrape(server), "ferry_inflight_bytes")


def test_hand_off_arenas_give_back_a_large_request_and_every_byte_counted_is_released(server) -> None:
    # 12 MiB in, 12 MiB out: with intakes, the request's block fills 12 MiB of its intake's arena and the
    # answer's block 12 MiB of the model process's, both beyond the start an arena keeps resident
    n = 3 * MIB
    assert 4 * n > KEEP_RESIDENT
    status, text = _post(server, "/v2/models/wide/infer", *_binary_request(n))
    assert status == 200, text
    deadline = time.monotonic() + 30  # hang guard: the intake's "free" of the answer's block reaches the model process
    while (_counted_bytes(server) or max(_arenas_resident(server).values(), default=0) > KEEP_RESIDENT) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert _counted_bytes(server) == 0  # every hold released: the blocks and the answer
    arenas = _arenas_resident(server)
    page = os.sysconf("SC_PAGE_SIZE")
    assert all(size <= KEEP_RESIDENT + page for size in arenas.values()), arenas
    if len(psutil.Process(server.process.pid).children()) >= 2:
        assert len(arenas) >= 4  # each intake's two arenas, in both processes that hold them


def _server_uss(server: RunningServer) -> int:
    """The memory only the server's processes use (model process and intakes)."""
    root = psutil.Process(server.process.pid)
    return sum(process.memory_full_info().uss for process in [root, *root.children()])


def test_refused_requests_leave_nothing_behind(server) -> None:
    # refused after their messages and bodies were read, before the model runs: the error's traceback
    # holds the frames that hold them; that used to keep each one after the answer, uncounted (a gRPC
    # message in the AbortError grpc keeps: +60 MB per refused 30 MiB typed request; a REST body in a
    # reference cycle, until the garbage collector ran)
    before = _server_uss(server)
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_url, options=options) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        typed = _typed(8 * MIB)  # 32 MiB typed: its message twice, then its array
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(typed, timeout=60)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    body = _binary_request(12 * MIB)  # a 48 MiB body, then its outputs
    for _ in range(2):
        _refused_for_the_cap(*_post(server, "/v2/models/wide/infer", *body))
    deadline = time.monotonic() + 30  # hang guard: what is freed may take a moment to leave (the heap is trimmed)
    while (grew := _server_uss(server) - before) > 16 * MIB and time.monotonic() < deadline:
        time.sleep(0.1)
    assert grew <= 16 * MIB, f"{grew / MIB:.0f} MiB kept"  # 4 refused requests of 32-48 MiB: none kept
