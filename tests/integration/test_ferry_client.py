"""Ferry's own client (HTTP and gRPC, sync and asyncio) against a real server on loopback."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from ferry_client import (
    AsyncGrpcClient,
    AsyncHttpClient,
    GrpcClient,
    HttpClient,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)

from .test_tritonclient import all_type_inputs, simple_inputs


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    made = HttpClient(server.http_url) if request.param == "http" else GrpcClient(server.grpc_url)
    with made:
        yield made


def test_health_metadata_config(client) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple") and not client.is_model_ready("nope")
    assert "statistics" in client.server_metadata()["extensions"]
    meta = client.model_metadata("simple")
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    assert client.model_config("simple")["max_batch_size"] == 8
    assert {row["name"] for row in client.repository_index()} >= {"simple", "digits"}


def test_metadata_is_the_same_dict_over_http_and_grpc(server) -> None:
    """Including ``parameters``: plain values on both (gRPC's InferParameter wrappers unwrapped), and
    absent on both for a model without any."""
    with HttpClient(server.http_url) as http, GrpcClient(server.grpc_url) as grpc_client:
        for model in ("digits", "digit_detector", "face_detector", "simple"):
            over_http, over_grpc = http.model_metadata(model), grpc_client.model_metadata(model)
            assert over_grpc == over_http, model
        assert http.model_metadata("digit_detector")["parameters"]["image_task"] == "detect"
        assert "parameters" not in grpc_client.model_metadata("simple")

    async def both() -> tuple[dict, dict]:
        async with AsyncHttpClient(server.http_url) as http, AsyncGrpcClient(server.grpc_url) as grpc_client:
            return await http.model_metadata("digits"), await grpc_client.model_metadata("digits")

    over_http, over_grpc = asyncio.run(both())
    assert over_grpc == over_http


@pytest.mark.parametrize("binary", [True, False])
def test_infer_every_datatype(client, binary: bool) -> None:
    arrays = all_type_inputs()
    result = client.infer("identity_all", arrays, binary=binary)
    for name, array in arrays.items():
        out = result[name.replace("in_", "out_")]
        if name == "in_BYTES":
            assert list(out.reshape(-1)) == list(array.reshape(-1))
        else:
            assert out.dtype == array.dtype
            np.testing.assert_array_equal(out, array)
    values = np.array([[1.0, -2.5, 0.15625]], dtype=np.float32)
    bf16 = client.infer("identity_bf16", {"in_BF16": values}, datatypes={"in_BF16": "BF16"})
    np.testing.assert_array_equal(bf16["out_BF16"], values)


def test_requested_outputs_and_id(client) -> None:
    arrays = simple_inputs(batch=2)
    result = client.infer("simple", arrays, ["OUTPUT1"], request_id="abc")
    assert list(result.outputs) == ["OUTPUT1"] and result.id == "abc"
    np.testing.assert_array_equal(result["OUTPUT1"], arrays["INPUT0"] - arrays["INPUT1"])


def test_errors_are_typed(client) -> None:
    with pytest.raises(NotFoundError, match="Request for unknown model: 'nope' is not found"):
        client.infer("nope", simple_inputs())
    with pytest.raises(InvalidArgumentError, match=re.escape("missing required input(s) ['INPUT1']")):
        client.infer("simple", {"INPUT0": simple_inputs()["INPUT0"]})
    with pytest.raises(InvalidArgumentError, match="batch size 9"):
        client.infer("simple", simple_inputs(batch=9))
    client.unload_model("fixed_nobatch")
    try:
        with pytest.raises(UnavailableError, match="has no available versions"):
            client.infer("fixed_nobatch", {"x": np.zeros((2, 3), np.float32)})
    finally:
        client.load_model("fixed_nobatch")
    result = client.infer("fixed_nobatch", {"x": np.full((2, 3), 2, np.float32)})
    np.testing.assert_array_equal(result["y"], np.full((2, 3), 4, np.float32))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_async_clients_run_concurrently(server, protocol: str) -> None:
    async def main() -> list:
        client = AsyncHttpClient(server.http_url) if protocol == "http" else AsyncGrpcClient(server.grpc_url)
        async with client:
            assert await client.is_model_ready("simple_fp32")
            x = np.arange(32, dtype=np.float32).reshape(2, 16)
            return await asyncio.gather(
                *(client.infer("simple_fp32", {"INPUT0": x + i, "INPUT1": x}) for i in range(16))
            )

    results = asyncio.run(main())
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result["OUTPUT0"], x + i + x)
