"""The perf tool's pure parts: ranges, windows and stability, inputs, load splitting, reports."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from ferry_client.perf import inputs as perf_inputs
from ferry_client.perf import server_stats
from ferry_client.perf.measure import WindowStats, is_stable, split_windows, window_stats
from ferry_client.perf.ranges import parse_range
from ferry_client.perf.report import client_limit_note, table, write_csv, write_json
from ferry_client.perf.runner import StepPlan, StepResult, split_load
from ferry_client.perf.wire import encode_requests

SIMPLE_META = {
    "name": "simple",
    "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
    ],
}


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("1:32:x2", [1, 2, 4, 8, 16, 32]),
        ("4:16:4", [4, 8, 12, 16]),
        ("8", [8]),
        ("1:8", [1, 2, 4, 8]),
        ("3:10:x2", [3, 6, 10]),
        ("1:5:3", [1, 4, 5]),
    ],
)
def test_ranges(text, values) -> None:
    assert parse_range(text) == values


@pytest.mark.parametrize("text", ["", "0:4", "8:4", "1:8:x1", "1:8:0", "a:b", "1:2:3:4", "1::2"])
def test_bad_ranges_say_what_is_wrong(text) -> None:
    with pytest.raises(ValueError, match="range"):
        parse_range(text, "range")


def test_rate_ranges_take_fractions() -> None:
    assert parse_range("0.5:2", integer=False) == [0.5, 1.0, 2.0]


def test_window_statistics_and_percentiles() -> None:
    latencies = np.arange(1, 101, dtype=np.float64) * 1000  # 1..100 ms
    stats = window_stats(latencies, failed=3, seconds=2.0)
    assert stats.completed == 100 and stats.failed == 3 and stats.throughput == 50.0
    assert stats.p50_us == pytest.approx(50_500) and stats.p99_us == pytest.approx(99_010)
    assert stats.avg_us == pytest.approx(50_500)
    empty = window_stats(np.empty(0), failed=0, seconds=1.0)
    assert empty.throughput == 0 and np.isnan(empty.p50_us)


def _window(throughput: float, p50: float) -> WindowStats:
    return WindowStats(1.0, int(throughput), 0, throughput, p50, p50, p50, p50, p50)


def test_stability_needs_three_agreeing_windows() -> None:
    assert not is_stable([_window(100, 10), _window(100, 10)], 0.1)
    assert is_stable([_window(50, 99), _window(100, 10), _window(105, 10.5), _window(95, 9.8)], 0.1)
    assert not is_stable([_window(100, 10), _window(100, 10), _window(125, 10)], 0.1)  # throughput moved
    assert not is_stable([_window(100, 10), _window(100, 10), _window(100, 13)], 0.1)  # latency moved
    assert not is_stable([_window(0, float("nan"))] * 3, 0.1)


def test_completions_are_cut_into_windows() -> None:
    ends = np.array([9.5, 10.0, 10.9, 11.0, 12.5])
    assert split_windows(ends, 10.0, 1.0).tolist() == [-1, 0, 0, 1, 2]


def test_load_is_shared_among_workers() -> None:
    plan = StepPlan(max_outstanding=100)
    assert [w.concurrency for w in split_load("concurrency", 5, 2, plan, 0)] == [3, 2]
    assert [w.concurrency for w in split_load("concurrency", 1, 2, plan, 0)] == [1, 0]
    rates = split_load("rate", 300.0, 3, plan, 1)
    assert [w.rate for w in rates] == [100.0] * 3 and len({w.seed for w in rates}) == 3
    assert all(w.max_outstanding == 33 for w in rates)


def test_random_inputs_follow_metadata_and_shapes() -> None:
    specs, batched = perf_inputs.model_inputs(SIMPLE_META, {"max_batch_size": 8})
    samples = perf_inputs.random_samples(specs, batched, 4, {})
    assert batched and samples[0]["INPUT0"].shape == (4, 16) and samples[0]["INPUT0"].dtype == np.int32
    variable = {"inputs": [{"name": "x", "datatype": "FP16", "shape": [-1, 3, -1]}]}
    specs, batched = perf_inputs.model_inputs(variable, {"max_batch_size": 0})
    with pytest.raises(ValueError, match="--shape x:"):
        perf_inputs.random_samples(specs, batched, 1, {})
    sample = perf_inputs.random_samples(specs, batched, 1, perf_inputs.parse_shapes(["x:2,3,5"]))[0]
    assert sample["x"].shape == (2, 3, 5) and sample["x"].dtype == np.float16
    with pytest.raises(ValueError, match="NAME:D1"):
        perf_inputs.parse_shapes(["x=2,3"])


def test_file_inputs_npz_npy_json(tmp_path) -> None:
    specs, batched = perf_inputs.model_inputs(SIMPLE_META, {"max_batch_size": 8})
    np.savez(tmp_path / "data.npz", INPUT0=np.ones((6, 16)), INPUT1=np.zeros((6, 16)))
    samples = perf_inputs.file_samples(tmp_path / "data.npz", specs, batched, 2, {})
    assert len(samples) == 3 and samples[0]["INPUT0"].shape == (2, 16) and samples[0]["INPUT0"].dtype == np.int32
    (tmp_path / "data.json").write_text(
        json.dumps(
            {
                "data": [
                    {"INPUT0": list(range(16)), "INPUT1": {"content": [1] * 16, "shape": [16]}},
                    {"INPUT0": list(range(16, 32)), "INPUT1": {"content": [2] * 16, "shape": [16]}},
                ]
            }
        )
    )
    samples = perf_inputs.file_samples(tmp_path / "data.json", specs, batched, 1, {})
    assert len(samples) == 2 and samples[1]["INPUT0"][0, 0] == 16 and samples[1]["INPUT1"].shape == (1, 16)
    np.save(tmp_path / "one.npy", np.ones((2, 16)))
    with pytest.raises(ValueError, match="single-input"):
        perf_inputs.file_samples(tmp_path / "one.npy", specs, batched, 1, {})
    np.savez(tmp_path / "short.npz", INPUT0=np.ones((1, 16)), INPUT1=np.ones((1, 16)))
    with pytest.raises(ValueError, match="fewer than the batch size"):
        perf_inputs.file_samples(tmp_path / "short.npz", specs, batched, 4, {})
    (tmp_path / "bad.json").write_text('{"data": [{"NOPE": [1]}]}')
    with pytest.raises(ValueError, match="not an input"):
        perf_inputs.file_samples(tmp_path / "bad.json", specs, batched, 1, {})


def test_image_folder_becomes_bytes_input(tmp_path) -> None:
    for name in ("a.png", "b.jpg", "notes.txt"):
        (tmp_path / name).write_bytes(name.encode())
    meta = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 8, 8]}]}
    specs, batched = perf_inputs.model_inputs(meta, {"max_batch_size": 4})
    samples = perf_inputs.image_samples(tmp_path, specs, batched, 1)
    assert [s["input"].tolist() for s in samples] == [[[b"a.png"]], [[b"b.jpg"]]]
    assert perf_inputs.datatype_overrides(samples, specs) == {"input": "BYTES"}
    body = encode_requests("http", "digits", "", samples, {"input": "BYTES"})[0]
    assert b'"datatype":"BYTES"' in body.body.replace(b" ", b"") and body.body.endswith(b"a.png")


def test_encoded_requests_match_the_sdk_wire_format() -> None:
    from ferry_client.protocol import grpc_service_pb2 as pb

    sample = {"INPUT0": np.arange(16, dtype=np.int32)[None], "INPUT1": np.ones((1, 16), np.int32)}
    grpc_request = encode_requests("grpc", "simple", "1", [sample], {"INPUT0": "INT32", "INPUT1": "INT32"})[0]
    message = pb.ModelInferRequest.FromString(grpc_request.body)
    assert message.model_name == "simple" and message.model_version == "1" and len(message.raw_input_contents) == 2
    assert np.frombuffer(message.raw_input_contents[0], np.int32).tolist() == list(range(16))
    http_request = encode_requests("http", "simple", "", [sample], {"INPUT0": "INT32", "INPUT1": "INT32"})[0]
    assert "Inference-Header-Content-Length" in http_request.headers


def test_server_breakdown_is_per_request() -> None:
    def stats(success: int, queue_ns: int, executions: int) -> dict:
        return {
            "model_stats": [
                {
                    "name": "m",
                    "version": "1",
                    "inference_count": success,
                    "execution_count": executions,
                    "inference_stats": {
                        "success": {"count": success, "ns": success * 2000},
                        "queue": {"count": success, "ns": queue_ns},
                        "compute_infer": {"count": success, "ns": success * 500},
                    },
                },
                {"name": "other", "version": "1", "inference_count": 99},
            ]
        }

    before = server_stats.totals(stats(10, 10_000, 10), "m")
    after = server_stats.totals(stats(30, 50_000, 15), "m")
    result = server_stats.breakdown(before, after)
    assert result.requests == 20 and result.queue_us == 2.0 and result.compute_infer_us == 0.5
    assert result.avg_batch == 4.0 and result.avg_request_us == 2.0


def test_reports_table_csv_json(tmp_path) -> None:
    window = window_stats(np.array([1000.0, 2000.0]), 0, 1.0)
    step = StepResult(
        "concurrency",
        4,
        window,
        [window],
        False,
        2,
        0,
        0,
        {},
        0.2,
        server_stats.ServerBreakdown(2, 0, 1.0, 0.5, 0.0, 0.4, 0.0, 1.0),
    )
    text = table([step])
    assert text.splitlines()[0].split()[0] == "concurrency" and "server_requests" in text
    write_csv(tmp_path / "r.csv", [step])
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert rows[0]["value"] == "4" and float(rows[0]["throughput"]) == 2.0
    empty = StepResult("rate", 10.0, window_stats(np.empty(0), 1, 1.0), [], False, 0, 1, 0, {"x": 1}, 0.0)
    write_json(tmp_path / "r.json", [step, empty], {"model": "m"})
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["steps"][1]["p50_us"] is None and document["steps"][0]["server"]["requests"] == 2


def test_steps_the_client_limited_are_named_under_the_table(tmp_path) -> None:
    window = window_stats(np.array([1000.0, 2000.0]), 0, 1.0)

    def step(value: int, busiest: float) -> StepResult:
        return StepResult("concurrency", value, window, [window], True, 2, 0, 0, {}, busiest, client_cores=busiest * 2)

    free, saturated = step(4, 0.5), step(16, 0.95)
    assert client_limit_note([free]) is None
    note = client_limit_note([free, saturated])
    assert note is not None and "concurrency 16 " in note and " 4" not in note
    header, *rows = table([free, saturated]).splitlines()
    assert header.split()[-2:] == ["client_cores", "client_limited"]
    assert rows[0].split()[-1] == "False" and rows[1].split()[-2:] == ["1.90", "True"]
    write_json(tmp_path / "r.json", [saturated], {"model": "m"})
    assert json.loads((tmp_path / "r.json").read_text())["steps"][0]["client_limited"] is True


def _perf(argv: list[str], capsys) -> tuple[int, str]:
    from ferry_client.cli import main

    code = main(["perf", *argv])
    return code, capsys.readouterr().err


def test_plot_without_matplotlib_fails_before_any_request(capsys, monkeypatch, tmp_path) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a)
    )
    # Nothing listens on port 9: had the tool tried to measure first, it would fail on the connection.
    code, err = _perf(["-m", "simple", "-u", "127.0.0.1:9", "--plot", str(tmp_path / "out.png")], capsys)
    assert code == 2
    assert err.strip() == (
        "ferry-client perf: --plot needs matplotlib, which is not installed "
        "(pip install '.[perf]' in the Ferry checkout (or './clients/python[perf]' where only the client is installed))"
    )


def test_output_folders_are_checked_before_measuring(capsys, tmp_path) -> None:
    code, err = _perf(["-m", "simple", "-u", "127.0.0.1:9", "--csv", str(tmp_path / "no" / "out.csv")], capsys)
    assert code == 2 and "--csv" in err and "does not exist" in err


def test_unreachable_server_is_one_line(capsys) -> None:
    code, err = _perf(["-m", "simple", "-u", "127.0.0.1:9"], capsys)
    assert code == 1
    assert len(err.strip().splitlines()) == 1 and err.startswith("ferry-client perf: 127.0.0.1:9:"), err


def test_default_sweep_is_short() -> None:
    """Three agreeing windows per step by default: a 3-step sweep on a steady server is about 15 s, and
    at most about 30 s when windows never agree (perf_analyzer's defaults took over a minute)."""
    import argparse

    from ferry_client.perf.cli import add_perf_arguments

    parser = argparse.ArgumentParser()
    add_perf_arguments(parser)
    args = parser.parse_args(["-m", "simple"])
    per_step_steady = args.warmup + 3 * args.measurement_interval / 1000
    per_step_worst = args.warmup + args.max_trials * args.measurement_interval / 1000
    assert 3 * per_step_steady <= 16 and 3 * per_step_worst <= 30


def _report_sigint_state(conn) -> None:
    import signal

    conn.send((signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []), signal.SIGINT in signal.sigpending()))


def test_a_ctrl_c_while_a_worker_is_spawned_reaches_the_coordinator_not_the_worker() -> None:
    """The Ctrl-C lands inside the spawn window (sent there by the test): the worker starts with it held
    back, and the coordinator raises KeyboardInterrupt as soon as the window closes (ignoring it lost it)."""
    import multiprocessing
    import signal
    import threading

    from ferry_client.perf.runner import _sigint_held

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_report_sigint_state, args=(child,))
    # Ctrl-C as a terminal's process has it (Python's handler, unblocked), whatever this test process
    # was left with by what ran in it before
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        with pytest.raises(KeyboardInterrupt), _sigint_held():
            process.start()
            # to the main thread: a process-wide signal may go to any other thread the test process has
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            held_here = signal.SIGINT in signal.sigpending()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)
    process.join(60)
    assert held_here
    assert parent.recv() == (True, False)  # blocked in the worker from its first instruction
