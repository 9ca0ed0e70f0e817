"""``ferry-client perf`` against a live server: sweeps, open loop, image folders, and its counts
cross-checked with the server's own statistics for the same run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ferry_client import HttpClient
from ferry_client.perf.server_stats import totals

PERF = [sys.executable, "-m", "ferry_client.cli", "perf"]
QUICK = ["--measurement-interval", "400", "--max-trials", "3", "--warmup", "0.2", "--stability-percentage", "50"]


def _run(args: list[str], tmp_path: Path, name: str) -> dict:
    out = tmp_path / f"{name}.json"
    result = subprocess.run(
        [*PERF, *args, *QUICK, "--json", str(out), "--csv", str(tmp_path / f"{name}.csv")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "throughput" in result.stdout  # the table
    assert "window 1" in result.stderr  # progress while it runs
    return json.loads(out.read_text())


def _server_successes(server, model: str) -> int:
    with HttpClient(server.http_url) as client:
        return totals(client.model_statistics(model), model)["success"]


def test_concurrency_sweep_counts_agree_with_the_server(server, tmp_path) -> None:
    before = _server_successes(server, "simple")
    report = _run(
        [
            "-m",
            "simple",
            "-u",
            server.http_url,
            "--concurrency-range",
            "1:4:x4",
            "--processes",
            "2",
            "--plot",
            str(tmp_path / "sweep.png"),
        ],
        tmp_path,
        "sweep",
    )
    after = _server_successes(server, "simple")
    steps = report["steps"]
    assert [s["value"] for s in steps] == [1, 4] and report["meta"]["processes"] == 2
    for step in steps:
        assert step["throughput"] > 0 and step["p50_us"] <= step["p99_us"]
        assert step["client_failures"] == 0
        assert step["server"]["requests"] == step["client_requests"]  # per step, from the statistics API
        assert step["server"]["compute_infer_us"] > 0 and step["server"]["queue_us"] >= 0
    assert after - before == sum(s["client_requests"] for s in steps)  # and checked independently here
    assert (tmp_path / "sweep.csv").read_text().startswith("mode,value,throughput")
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_open_loop_rate_over_grpc(server, tmp_path) -> None:
    report = _run(
        ["-m", "simple", "-i", "grpc", "-u", server.grpc_url, "--request-rate-range", "100", "--processes", "1"],
        tmp_path,
        "rate",
    )
    step = report["steps"][0]
    assert step["mode"] == "rate" and step["value"] == 100
    assert 60 <= step["throughput"] <= 140  # Poisson arrivals at 100/s over short windows
    assert step["server"]["requests"] == step["client_requests"]


def test_image_folder_and_json_inputs(server, digit_pngs, tmp_path) -> None:
    folder = tmp_path / "pngs"
    folder.mkdir()
    for index, data in enumerate(digit_pngs[0][:5]):
        (folder / f"{index}.png").write_bytes(data)
    report = _run(
        [
            "-m",
            "digits",
            "-i",
            "grpc",
            "-u",
            server.grpc_url,
            "--input-data",
            str(folder),
            "-b",
            "2",
            "--concurrency-range",
            "2",
        ],
        tmp_path,
        "images",
    )
    step = report["steps"][0]
    assert step["client_failures"] == 0 and step["server"]["requests"] == step["client_requests"] > 0
    data = tmp_path / "simple.json"
    data.write_text(json.dumps({"data": [{"INPUT0": list(range(16)), "INPUT1": [1] * 16}]}))
    report = _run(["-m", "simple", "-u", server.http_url, "--input-data", str(data)], tmp_path, "json")
    assert report["steps"][0]["client_failures"] == 0


def test_failures_are_counted_and_reported(server, tmp_path) -> None:
    """Requests the server refuses count as failures, with its message, and the exit status says so."""
    result = subprocess.run(
        [*PERF, "-m", "simple", "-u", server.http_url, "-b", "9", *QUICK], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "x HTTP 400:" in result.stderr and "batch size 9" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--concurrency-range", "8:2"], "need 0 < START <= END"),
        (["--input-data", "/no/such.npy"], "no such file or folder"),
        (["--shape", "INPUT0"], "NAME:D1"),
    ],
)
def test_bad_options_get_clear_errors(server, args, message) -> None:
    result = subprocess.run(
        [*PERF, "-m", "simple", "-u", server.http_url, *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
