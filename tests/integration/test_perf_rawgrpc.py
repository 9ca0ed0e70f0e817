"""The perf tool's raw HTTP/2 gRPC engine against a live Ferry server: answers decoded and checked,
flow control on a request larger than every window, error statuses counted as errors."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ferry_client.grpc import _infer_request, _infer_result
from ferry_client.perf.rawgrpc import PreparedCall, RawGrpcClient, Reply
from ferry_client.perf.wire import GRPC_INFER_METHOD
from ferry_client.protocol import grpc_service_pb2 as pb

from .test_security import TOKEN, client_context, mtls_server, pki  # noqa: F401 - the mutual-TLS server

PERF = [sys.executable, "-m", "ferry_client.cli", "perf"]
QUICK = ["--measurement-interval", "400", "--max-trials", "3", "--warmup", "0.2", "--stability-percentage", "50"]


def simple_call(batch: int = 1) -> tuple[PreparedCall, np.ndarray]:
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    message = _infer_request("simple", {"INPUT0": a, "INPUT1": np.ones_like(a)}, None, "", "", None, None, None)
    return PreparedCall.of(message.SerializeToString()), a + 1


def calls(
    url: str,
    prepared: list[PreparedCall],
    metadata: list[tuple[str, str]] | None = None,
    above_window: bool = False,
    tls: ssl.SSLContext | None = None,
) -> list[Reply]:
    """All calls at once on one client, as a perf worker makes them (``above_window``: each request
    is checked to be larger than what the server's flow-control windows let a stream send at once)."""

    async def run() -> tuple[list[Reply], int]:
        host, _, port = url.rpartition(":")
        client = RawGrpcClient(host, int(port), GRPC_INFER_METHOD, metadata or [], tls)
        try:
            if above_window:
                connection = await client._connection()
                assert all(p.size > connection.window for p in prepared), connection.window
            replies = await asyncio.gather(*(client.call(p) for p in prepared))
            return list(replies), len(client._connections)
        finally:
            await client.close()

    replies, connections = asyncio.run(run())
    assert connections == 1  # concurrent calls share one HTTP/2 connection
    return replies


def test_concurrent_calls_get_the_models_answers(server) -> None:
    prepared = [simple_call(batch) for batch in (1, 2, 3, 4) * 8]
    replies = calls(server.grpc_url, [p for p, _ in prepared])
    for reply, (_, expected) in zip(replies, prepared, strict=True):
        assert reply.error is None, reply.error
        result = _infer_result(pb.ModelInferResponse.FromString(reply.message))
        np.testing.assert_array_equal(result["OUTPUT0"], expected)


def test_a_request_larger_than_every_flow_control_window(server) -> None:
    """6 MB of input, more than the server lets a stream send at once (4 MiB with grpc's defaults):
    the DATA frames wait for the server's WINDOW_UPDATEs, and the answer is still right."""
    x = np.linspace(-1, 1, 1_500_000, dtype=np.float32).reshape(1, -1)
    message = _infer_request("dynamic_shape", {"x": x}, None, "", "", None, None, None)
    (reply,) = calls(server.grpc_url, [PreparedCall.of(message.SerializeToString())], above_window=True)
    assert reply.error is None, reply.error
    np.testing.assert_allclose(_infer_result(pb.ModelInferResponse.FromString(reply.message))["y"], x * 2 + 1)


def test_an_error_status_is_an_error_with_the_servers_message(server) -> None:
    bad, _ = simple_call(batch=9)  # max_batch_size is 8
    good, _ = simple_call()
    replies = calls(server.grpc_url, [bad, good])
    assert replies[0].error is not None and replies[0].error.startswith("INVALID_ARGUMENT: "), replies[0].error
    assert "batch size 9" in replies[0].error
    assert replies[1].error is None  # the connection carries on


@pytest.mark.parametrize("engine", ["raw", "grpcio"])
def test_perf_counts_refused_requests_as_failures(server, engine: str) -> None:
    result = subprocess.run(
        [*PERF, "-m", "simple", "-i", "grpc", "-u", server.grpc_url, "--grpc-engine", engine, "-b", "9", *QUICK],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "x INVALID_ARGUMENT:" in result.stderr and "batch size 9" in result.stderr, result.stderr
    assert f"grpc ({engine} engine)" in result.stderr


def test_perf_raw_engine_counts_agree_with_the_server(server, tmp_path: Path) -> None:
    out = tmp_path / "raw.json"
    result = subprocess.run(
        [
            *PERF,
            "-m",
            "simple",
            "-i",
            "grpc",
            "-u",
            server.grpc_url,
            "--concurrency-range",
            "1:8:x8",
            "--processes",
            "1",
            *QUICK,
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["meta"]["grpc_engine"] == "raw"  # the default where hpack is installed
    for step in report["steps"]:
        assert step["client_failures"] == 0 and step["throughput"] > 0
        assert step["server"]["requests"] == step["client_requests"]
        assert step["client_cores"] > 0 and step["client_limited"] == (step["client_cpu"] >= 0.9)


def test_perf_raw_engine_over_mutual_tls_with_a_token(mtls_server, pki) -> None:  # noqa: F811
    """TLS with ALPN h2, a client certificate and the bearer token as metadata; without the token,
    or with a wrong one, the call fails with the server's UNAUTHENTICATED."""
    tls = ["--ssl", "--root-certificates", str(pki.ca.cert)]
    tls += ["--certificate-chain", str(pki.client.cert), "--private-key", str(pki.client.key)]
    base = [*PERF, "-m", "simple", "-i", "grpc", "-u", mtls_server.grpc_url, "--grpc-engine", "raw", *tls, *QUICK]
    good = subprocess.run([*base, "--bearer-token", TOKEN], capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr
    prepared, expected = simple_call()
    metadata = [[], [("Authorization", "Bearer wrong")], [("Authorization", f"Bearer {TOKEN}")]]
    replies = [calls(mtls_server.grpc_url, [prepared], m, tls=client_context(pki))[0] for m in metadata]
    assert [r.error.split(":")[0] if r.error else None for r in replies] == ["UNAUTHENTICATED"] * 2 + [None]
    assert "invalid bearer token" in (replies[1].error or "")
    np.testing.assert_array_equal(
        _infer_result(pb.ModelInferResponse.FromString(replies[2].message))["OUTPUT0"], expected
    )
