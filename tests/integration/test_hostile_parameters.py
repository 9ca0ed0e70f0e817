"""Request parameters and shapes that reached an internal error (issue 38, "Minor"), both modes.

``/classify?timeout=2^64`` (or a priority past 64 bits) was a 500 with intake processes: the
hand-off to the model process cannot carry an integer past 64 bits. A gRPC ``timeout`` of NaN was
accepted there (the hand-off's JSON carried it as null: left out). A zero-sized variable dimension
(``text_detector`` with shape ``[1, 3, 0, 0]``) was a 500 from ONNX Runtime. Each now gets 400 /
INVALID_ARGUMENT naming what is wrong, and the next request is served.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from PIL import Image

from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import grpc_service_pb2_grpc as pb_grpc

from ..conftest import MODEL_REPO, RunningServer, start_server

pytestmark = pytest.mark.timeout(120)

UINT64_MAX = 2**64 - 1


@pytest.fixture(scope="module", params=["one process", "2 intake processes"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_parameters") / "models"
    for name in ("digits", "simple", "text_detector"):
        shutil.copytree(MODEL_REPO / name, repo / name)
    extra = ["--intake-processes", "2"] if request.param == "2 intake processes" else []
    running = start_server(repo, repo.parent / "server.log", *extra)
    yield running
    running.stop()


def _post(server: RunningServer, path: str, body: bytes, content_type: str) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=body, headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "white").save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    "query",
    [f"timeout={UINT64_MAX + 1}", f"priority={10**23}", "timeout=1e23", f"timeout={2**70}"],
)
def test_image_endpoint_parameters_past_64_bits_are_400(server: RunningServer, query: str) -> None:
    status, text = _post(server, f"/v2/models/digits/classify?{query}", _png(), "image/png")
    name = query.split("=")[0]
    assert status == 400, (status, text)
    assert f"query parameter '{name}' must be an integer between 0 and {UINT64_MAX}" in text, text
    status, _ = _post(server, "/v2/models/digits/classify", _png(), "image/png")
    assert status == 200


def _simple_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.ones((1, 16), np.int32).tobytes())
    return request


def test_v2_infer_parameters_past_64_bits_are_400(server: RunningServer) -> None:
    body = {
        "inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": [1] * 16} for n in ("INPUT0", "INPUT1")],
        "parameters": {"timeout": UINT64_MAX + 1},
    }
    status, text = _post(server, "/v2/models/simple/infer", json.dumps(body).encode(), "application/json")
    assert status == 400, (status, text)
    assert f"request parameter 'timeout' must be an integer between 0 and {UINT64_MAX}" in text, text


@pytest.mark.parametrize("key", ["timeout", "priority"])
def test_a_grpc_parameter_of_nan_is_invalid_argument(server: RunningServer, key: str) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = _simple_request()
        request.parameters[key].double_param = math.nan
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request, timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"request parameter '{key}' must be an integer" in (refused.value.details() or "")
        assert stub.ModelInfer(_simple_request(), timeout=30).outputs


def test_a_zero_sized_image_tensor_is_400_not_an_engine_failure(server: RunningServer) -> None:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, 0, 0], "data": []}]}
    status, text = _post(server, "/v2/models/text_detector/infer", json.dumps(body).encode(), "application/json")
    assert status == 400, (status, text)
    assert "the model cannot run on these inputs" in text and "Invalid input shape" in text, text
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, 32, 32], "data": [0.0] * 3 * 32 * 32}]}
    status, text = _post(server, "/v2/models/text_detector/infer", json.dumps(body).encode(), "application/json")
    assert status == 200, (status, text)
