"""Every kind of bad request gets a precise message and the right status, and the next one is served."""

from __future__ import annotations

import gzip
import json
import struct

import grpc
import httpx
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from .test_tritonclient import simple_inputs
from .triton_helpers import Triton, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(params=["http", "grpc"])
def triton(request, server) -> Triton:
    return connect(request.param, server)


@pytest.fixture
def http(server):
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client:
        yield client


@pytest.fixture
def grpc_stub(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def assert_still_serving(triton: Triton) -> None:
    arrays = simple_inputs()
    result = triton.infer("simple", arrays, ["OUTPUT0"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])


def simple_json(**changes) -> dict:
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
    body.update(changes)
    return body


# --- through the official tritonclient, both protocols -------------------------------------


def test_unknown_model_and_version(triton: Triton) -> None:
    triton.expect_error(
        "not_found", "Request for unknown model: 'nope' is not found", triton.infer, "nope", simple_inputs()
    )
    triton.expect_error(
        "not_found",
        "Request for unknown model: 'simple' version 9 is not found",
        triton.infer,
        "simple",
        simple_inputs(),
        model_version="9",
    )
    triton.expect_error("not_found", "unknown model", triton.client.get_model_metadata, "nope")
    triton.expect_error("not_found", "unknown model", triton.client.get_model_config, "nope")
    assert_still_serving(triton)


def test_wrong_datatype(triton: Triton) -> None:
    arrays = {k: v.astype(np.float32) for k, v in simple_inputs().items()}
    triton.expect_error("invalid", "expected datatype INT32, got FP32", triton.infer, "simple", arrays)
    assert_still_serving(triton)


def test_missing_and_unexpected_inputs(triton: Triton) -> None:
    arrays = simple_inputs()
    triton.expect_error(
        "invalid", "missing required input(s) ['INPUT1']", triton.infer, "simple", {"INPUT0": arrays["INPUT0"]}
    )
    extra = {**arrays, "INPUT9": arrays["INPUT0"]}
    triton.expect_error("invalid", "unexpected inference input 'INPUT9'", triton.infer, "simple", extra)
    triton.expect_error("invalid", "unexpected inference output 'NOPE'", triton.infer, "simple", arrays, ["NOPE"])
    assert_still_serving(triton)


def test_wrong_shape_and_batch_over_max(triton: Triton) -> None:
    bad_shape = {k: np.zeros((1, 15), np.int32) for k in ("INPUT0", "INPUT1")}
    triton.expect_error("invalid", "expected shape [-1, 16]", triton.infer, "simple", bad_shape)
    too_big = simple_inputs(batch=9)
    triton.expect_error("invalid", "batch size 9 is outside 1..8", triton.infer, "simple", too_big)
    assert_still_serving(triton)


# --- raw HTTP: malformed bodies ----------------------------------------------------------------


def post_infer(http: httpx.Client, content: bytes, headers: dict | None = None, model: str = "simple"):
    return http.post(f"/v2/models/{model}/infer", content=content, headers=headers or {})


def test_malformed_json(http: httpx.Client, server) -> None:
    response = post_infer(http, b'{"inputs": [')
    assert response.status_code == 400
    assert "malformed JSON" in response.json()["error"]
    response = post_infer(http, b"[1, 2]")
    assert response.status_code == 400 and "JSON object" in response.json()["error"]
    assert_still_serving(connect("http", server))


def test_data_length_disagrees_with_shape(http: httpx.Client, triton: Triton, grpc_stub) -> None:
    body = simple_json()
    body["inputs"][0]["data"] = list(range(15))
    response = post_infer(http, json.dumps(body).encode())
    assert response.status_code == 400
    assert response.json()["error"] == "tensor 'INPUT0': shape [1, 16] needs 16 elements but data holds 15"
    # Binary: 60 bytes where 64 are needed.
    header = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 60}},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
            ]
        }
    ).encode()
    response = post_infer(http, header + bytes(124), {"Inference-Header-Content-Length": str(len(header))})
    assert response.status_code == 400
    assert "expected 64 bytes for INT32 shape [1, 16], got 60" in response.json()["error"]
    # gRPC raw contents of the wrong length.
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    request.raw_input_contents.extend([bytes(64), bytes(63)])
    with pytest.raises(grpc.RpcError) as info:
        grpc_stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tensor 'INPUT1': expected 64 bytes" in info.value.details()
    assert_still_serving(triton)


def test_wrong_json_value_types(http: httpx.Client) -> None:
    body = simple_json()
    body["inputs"][0]["data"] = ["a"] * 16
    response = post_infer(http, json.dumps(body).encode())
    assert response.status_code == 400
    assert "INT32 data must be integers, element 0 is 'a'" in response.json()["error"]
    body = simple_json()
    body["inputs"][0]["datatype"] = "INT33"
    response = post_infer(http, json.dumps(body).encode())
    assert response.status_code == 400 and "unsupported datatype 'INT33'" in response.json()["error"]


def test_binary_header_length_past_body(http: httpx.Client, server) -> None:
    body = json.dumps(simple_json()).encode()
    response = post_infer(http, body, {"Inference-Header-Content-Length": str(len(body) + 10)})
    assert response.status_code == 400
    assert (
        f"Inference-Header-Content-Length is {len(body) + 10} but the body holds only {len(body)}"
        in response.json()["error"]
    )
    header = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
            ]
        }
    ).encode()
    response = post_infer(http, header + bytes(100), {"Inference-Header-Content-Length": str(len(header))})
    assert response.status_code == 400
    assert (
        "tensor 'INPUT1': binary_data_size 64 runs past the end of the body (36 bytes remain)"
        in response.json()["error"]
    )
    assert_still_serving(connect("http", server))


def _bytes_input_set(bad_element: bytes) -> tuple[dict, bytes]:
    """identity_all inputs where in_BYTES carries ``bad_element`` as its raw payload."""
    entries, blobs = [], []
    for datatype, size in (
        ("BOOL", 1),
        ("UINT8", 1),
        ("UINT16", 2),
        ("UINT32", 4),
        ("UINT64", 8),
        ("INT8", 1),
        ("INT16", 2),
        ("INT32", 4),
        ("INT64", 8),
        ("FP16", 2),
        ("FP32", 4),
        ("FP64", 8),
    ):
        entries.append(
            {"name": f"in_{datatype}", "shape": [1, 1], "datatype": datatype, "parameters": {"binary_data_size": size}}
        )
        blobs.append(bytes(size))
    entries.append(
        {"name": "in_BYTES", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": len(bad_element)}}
    )
    blobs.append(bad_element)
    return {"inputs": entries}, b"".join(blobs)


def test_bytes_length_prefix_overrun(http: httpx.Client, grpc_stub, server) -> None:
    overrun = struct.pack("<I", 1000) + b"abc"
    header, blob = _bytes_input_set(overrun)
    head = json.dumps(header).encode()
    response = post_infer(http, head + blob, {"Inference-Header-Content-Length": str(len(head))}, "identity_all")
    assert response.status_code == 400
    assert "tensor 'in_BYTES': BYTES element 0 declares 1000 bytes but only 3 remain" in response.json()["error"]
    request = service_pb2.ModelInferRequest(model_name="identity_all")
    request.inputs.add(name="in_BYTES", datatype="BYTES", shape=[1, 1])
    request.raw_input_contents.append(overrun)
    with pytest.raises(grpc.RpcError) as info:
        grpc_stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "BYTES element 0 declares 1000 bytes" in info.value.details()
    assert_still_serving(connect("grpc", server))


def test_gzip_and_deflate_bodies(http: httpx.Client) -> None:
    body = json.dumps(simple_json()).encode()
    for encoding, data in (("gzip", gzip.compress(body)), ("deflate", __import__("zlib").compress(body))):
        response = post_infer(http, data, {"Content-Encoding": encoding})
        assert response.status_code == 200, response.text
        assert response.json()["outputs"][0]["data"][:3] == [1, 2, 3]
    response = post_infer(http, b"not gzip", {"Content-Encoding": "gzip"})
    assert response.status_code == 400 and "not valid gzip data" in response.json()["error"]


def test_unknown_route_and_method(http: httpx.Client) -> None:
    response = http.get("/v2/nothing/here")
    assert response.status_code == 404 and "error" in response.json()
    response = http.get("/v2/models/simple/infer")
    assert response.status_code == 405 and "error" in response.json()


def test_a_trailing_slash_is_a_json_404_not_a_redirect(http: httpx.Client, png: bytes) -> None:
    """A redirect would answer a POST with an empty 307 that some clients follow without the body."""
    response = http.post("/v2/models/digit_detector/detect/", content=png, headers={"Content-Type": "image/png"})
    assert response.status_code == 404, (response.status_code, response.headers)
    assert response.json() == {
        "error": "no route /v2/models/digit_detector/detect/: Ferry's paths have no trailing slash "
        "(/v2/models/digit_detector/detect)"
    }
    assert http.get("/v2/health/ready/").status_code == 404


# --- image endpoints' query parameters, empty bodies, the OpenAPI document ------------------------


@pytest.fixture(scope="module")
def png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((16, 16), 200, np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("path", "query", "message"),
    [
        (
            "digits/classify",
            "threshold=0.5",
            "unknown query parameter 'threshold' for /classify (accepted: top_k, priority, timeout)",
        ),
        ("digits/classify", "top_k=0", "query parameter 'top_k' must be an integer >= 1, got 0"),
        ("digits/classify", "top_k=abc", "query parameter 'top_k' must be an integer >= 1, got 'abc'"),
        ("digits/classify", "top_k=1&top_k=2", "query parameter 'top_k' given 2 times; give it once"),
        ("digits/classify", "topk=2", "did you mean 'top_k'?"),
        ("digit_detector/detect", "score_threshold=2", "'score_threshold' must be a number between 0 and 1, got 2"),
        ("digit_detector/detect", "score_threshold=", "query parameter 'score_threshold' is empty"),
        ("digit_detector/detect", "iou_threshold=nan", "'iou_threshold' must be a number between 0 and 1, got nan"),
        ("digit_detector/detect", "max_detections=0", "'max_detections' must be an integer >= 1, got 0"),
        ("digit_detector/detect", "threshold=0.3", "unknown query parameter 'threshold' for /detect"),
    ],
)
def test_image_endpoint_query_mistakes_are_named(http, png: bytes, path: str, query: str, message: str) -> None:
    response = http.post(f"/v2/models/{path}?{query}", content=png, headers={"Content-Type": "image/png"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error
    assert "{'" not in error and "[{" not in error  # no Python repr of a validation error


def test_image_endpoint_accepts_its_documented_parameters(http, png: bytes) -> None:
    response = http.post("/v2/models/digits/classify?top_k=2", content=png, headers={"Content-Type": "image/png"})
    assert response.status_code == 200 and len(response.json()["results"][0]["classes"]) == 2
    query = "score_threshold=0.1&iou_threshold=0.5&max_detections=3"
    response = http.post(
        f"/v2/models/digit_detector/detect?{query}", content=png, headers={"Content-Type": "image/png"}
    )
    assert response.status_code == 200 and len(response.json()["results"][0]["detections"]) <= 3


def test_unknown_model_with_empty_body_is_not_found(http) -> None:
    response = http.post("/v2/models/nope/infer", json={})
    assert response.status_code == 404 and "unknown model: 'nope'" in response.json()["error"]
    response = http.post("/v2/models/simple/infer", json={})
    assert response.status_code == 400
    assert "expected 2 inputs but got 0 inputs for model" in response.json()["error"]


def test_openapi_documents_the_errors_the_server_sends(http) -> None:
    document = http.get("/openapi.json").json()
    statuses = {status for path in document["paths"].values() for op in path.values() for status in op["responses"]}
    assert "422" not in statuses
    assert "HTTPValidationError" not in document["components"]["schemas"]
    classify = document["paths"]["/v2/models/{model}/classify"]["post"]
    assert classify["responses"]["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    assert {p["name"] for p in classify["parameters"] if p["in"] == "query"} == {
        "top_k",
        "priority",
        "timeout",
        "version",
    }
    embed = document["paths"]["/v2/models/{model}/embed"]["post"]
    assert {p["name"] for p in embed["parameters"] if p["in"] == "query"} == {"priority", "timeout", "version"}
    detect = document["paths"]["/v2/models/{model}/detect"]["post"]
    query = {p["name"]: p["schema"] for p in detect["parameters"] if p["in"] == "query"}
    assert query["score_threshold"] == {"type": "number", "minimum": 0.0, "maximum": 1.0}
