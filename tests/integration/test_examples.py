"""Every script in clients/examples/ runs against its own live server (explicit mode, so the
repository calls in the examples cannot disturb the shared server of other tests)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from google.protobuf import json_format
from PIL import Image

from ferry_client.protocol import grpc_service_pb2 as pb

from ..conftest import MODEL_REPO, ROOT, RunningServer, detector_module, start_server

EXAMPLES = ROOT / "clients" / "examples"


@pytest.fixture(scope="module")
def example_server(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("examples") / "models"
    shutil.copytree(MODEL_REPO, repo)
    running = start_server(repo, repo.parent / "server.log", "--model-control-mode", "explicit", "--load-model", "*")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def images(tmp_path_factory, digit_pngs) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("images")
    digit = folder / "digit.png"
    digit.write_bytes(digit_pngs[0][0])
    scene = folder / "scene.png"
    Image.fromarray(detector_module().held_out_scenes(count=1)[0].image).save(scene)
    return digit, scene


def _run(command: list[str], **env: str) -> str:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, cwd=EXAMPLES, env={**os.environ, **env}
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_every_rest_endpoint(example_server, images) -> None:
    out = _run(
        ["bash", "curl.sh", str(images[0]), str(images[1])],
        FERRY_HTTP=example_server.http_url,
        FERRY_METRICS=f"127.0.0.1:{example_server.metrics_port}",
    )
    assert '"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]' in out  # JSON inference
    assert '"classes":[{"index":' in out and '"detections":[{"box":' in out
    assert 'nv_inference_request_success{model="simple"' in out


def test_python_examples(example_server, images) -> None:
    digit, scene = (str(p) for p in images)
    out = _run([sys.executable, "http_client.py", "--url", example_server.http_url, digit, scene])
    assert "digit: [('" in out and "found " in out and "expected error:" in out
    out = _run([sys.executable, "grpc_client.py", "--url", example_server.grpc_url])
    assert "top-2 of a blank image:" in out and "expected error: [NOT_FOUND]" in out
    out = _run(
        [
            sys.executable,
            "asyncio_clients.py",
            "--http",
            example_server.http_url,
            "--grpc",
            example_server.grpc_url,
            digit,
        ]
    )
    assert "http: 64 concurrent requests" in out and "grpc: 64 concurrent requests" in out
    out = _run(
        [sys.executable, "tritonclient_compat.py", "--http", example_server.http_url, "--grpc", example_server.grpc_url]
    )
    assert out.count("[[0, 2, 4, 6") == 2


def _grpcurl_calls() -> list[tuple[str, str]]:
    """(method, JSON body) of every grpcurl line in grpcurl.sh."""
    calls = []
    for line in (EXAMPLES / "grpcurl.sh").read_text().splitlines():
        if not line.startswith('"${G[@]}"'):
            continue
        words = shlex.split(line)
        body = words[words.index("-d") + 1] if "-d" in words else "{}"
        calls.append((words[-1], body))
    return calls


def test_grpcurl_calls_replayed(example_server) -> None:
    """grpcurl is not installable here: replay each documented call (same method and JSON) instead."""
    calls = _grpcurl_calls()
    assert len(calls) == 11
    if shutil.which("grpcurl"):
        _run(["bash", "grpcurl.sh"], FERRY_GRPC=example_server.grpc_url)
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    with grpc.insecure_channel(example_server.grpc_url) as channel:
        for path, body in calls:
            method = service.methods_by_name[path.rsplit("/", 1)[1]]
            request_type = pb.__dict__[method.input_type.name]
            response_type = pb.__dict__[method.output_type.name]
            request = json_format.Parse(body, request_type())
            call = channel.unary_unary(
                f"/{path}",
                request_serializer=request_type.SerializeToString,
                response_deserializer=response_type.FromString,
            )
            response = call(request, timeout=30)
            if method.name == "ModelInfer":
                names = [o.name for o in response.outputs]
                output0 = np.frombuffer(response.raw_output_contents[names.index("OUTPUT0")], np.int32)
                assert output0.tolist() == list(range(1, 17))
