"""Input limits, checked before decoding, on both protocols: element counts, BYTES elements, the
number of inputs, JSON size and depth, body size, image pixels. Each gets a precise error and the
right status, and the server goes on serving."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest
from PIL import Image

from ferry_client import GrpcClient
from ferry_client.codec import HEADER_LENGTH
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import MODEL_REPO, RunningServer, start_server

LIMITS = [
    "--max-tensor-elements",
    "1000",
    "--max-bytes-elements",
    "10",
    "--max-inputs-per-request",
    "4",
    "--http-max-json-bytes",
    "20000",
    "--http-max-body-bytes",
    "100000",
]


@pytest.fixture(scope="module")
def limited(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("limits") / "models"
    import shutil

    for name in ("simple", "identity_all", "digits"):
        shutil.copytree(MODEL_REPO / name, repo / name)
    running = start_server(repo, repo.parent / "server.log", *LIMITS)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def http(limited) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{limited.http_url}", timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def stub(limited) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(limited.grpc_url, options=[("grpc.max_send_message_length", 1 << 28)]) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def _binary(inputs: list[tuple[str, str, list[int], bytes]]) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": len(b)}}
                for n, d, s, b in inputs
            ]
        }
    ).encode()
    return header + b"".join(b for *_, b in inputs), {HEADER_LENGTH: str(len(header))}


def _grpc_error(stub, request: pb.ModelInferRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request, timeout=30)
    return caught.value


def _served(limited) -> None:
    x = np.arange(16, dtype=np.int32)[None]
    with GrpcClient(limited.grpc_url) as client:
        assert (client.infer("simple", {"INPUT0": x, "INPUT1": x})["OUTPUT0"] == 2 * x).all()


def test_tensor_element_limit(http, stub, limited) -> None:
    body, headers = _binary([("INPUT0", "INT32", [1, 2000], bytes(8000))])
    response = http.post("/v2/models/simple/infer", content=body, headers=headers)
    assert response.status_code == 413
    assert response.json()["error"] == "tensor 'INPUT0': 2000 elements exceed the limit of 1000 per tensor"
    request = pb.ModelInferRequest(model_name="simple")
    request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 2000])
    request.raw_input_contents.append(bytes(8000))
    error = _grpc_error(stub, request)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "2000 elements exceed" in error.details()
    _served(limited)


def test_bytes_elements_and_length_prefixes(http, stub, limited) -> None:
    """A huge BYTES shape with tiny data is refused before a single element object is made."""
    body, headers = _binary([("BYTES", "BYTES", [1, 1_000_000_000], struct.pack("<I", 0))])
    response = http.post("/v2/models/identity_all/infer", content=body, headers=headers)
    assert response.status_code == 413 and "1000000000 BYTES elements exceed the limit of 10" in response.text
    request = pb.ModelInferRequest(model_name="identity_all")
    request.inputs.add(name="BYTES", datatype="BYTES", shape=[11])
    request.raw_input_contents.append(struct.pack("<I", 0) * 11)
    assert _grpc_error(stub, request).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    lying = struct.pack("<I", 1 << 30) + b"abc"  # a length prefix far past the data
    body, headers = _binary([("BYTES", "BYTES", [1, 1], lying)])
    response = http.post("/v2/models/identity_all/infer", content=body, headers=headers)
    assert response.status_code == 400 and "declares 1073741824 bytes but only 3 remain" in response.text
    _served(limited)


def test_number_of_inputs(http, stub, limited) -> None:
    inputs = [{"name": f"in{i}", "datatype": "INT32", "shape": [1], "data": [1]} for i in range(5)]
    response = http.post("/v2/models/simple/infer", json={"inputs": inputs})
    assert response.status_code == 400 and response.json()["error"] == "request has 5 inputs; at most 4 are accepted"
    request = pb.ModelInferRequest(model_name="simple")
    for i in range(5):
        request.inputs.add(name=f"in{i}", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    error = _grpc_error(stub, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "at most 4" in error.details()


def test_json_size_depth_and_body_size(http, limited) -> None:
    big = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}], "id": "x" * 25000}
    response = http.post("/v2/models/simple/infer", json=big)
    assert response.status_code == 413 and "binary tensor data extension" in response.json()["error"]
    deep = b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    response = http.post("/v2/models/simple/infer", content=deep, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    body, headers = _binary([("INPUT0", "FP32", [1, 30000], bytes(120000))])
    response = http.post("/v2/models/simple/infer", content=body, headers=headers)
    assert response.status_code == 413 and "exceeds the limit of 100000 bytes" in response.json()["error"]
    _served(limited)


def test_image_pixel_limit(http, limited) -> None:
    """Decompression bombs: PNGs of a few KB that would decode to 100-400 megapixels are refused
    from their headers (Ferry's 40 MP default limit, or Pillow's own bomb guard beyond 179 MP)."""
    for side, message in (
        (10000, "100000000 pixels, more than the limit of 40000000"),
        (20000, "could be decompression bomb"),
    ):
        buffer = io.BytesIO()
        Image.new("1", (side, side)).save(buffer, format="PNG")
        assert len(buffer.getvalue()) < 100000
        response = http.post(
            "/v2/models/digits/classify",
            content=buffer.getvalue(),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert response.status_code == 400 and message in response.json()["error"], response.text
    _served(limited)
