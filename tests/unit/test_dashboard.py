"""The dashboard's server side without a server: the metrics snapshot over a real Prometheus
registry, the model overview over an unstarted repository, and the assets inside the built wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

from prometheus_client.core import GaugeMetricFamily

from ferry.api.dataplane import DataPlane
from ferry.dashboard.models import models_overview
from ferry.dashboard.snapshot import metrics_snapshot
from ferry.metrics import BATCH_BUCKETS, LATENCY_BUCKETS_US, Metrics
from ferry.repository.manager import ControlMode, ModelManager
from ferry.statistics import ModelStats

from ..conftest import MODEL_REPO, ROOT

STATIC_FILES = (
    "index.html",
    "app.js",
    "api.js",
    "charts.js",
    "stats.js",
    "tryit.js",
    "style.css",
    "vendor/uPlot.iife.min.js",
    "vendor/uPlot.min.css",
)


def _loaded(name: str, version: int) -> SimpleNamespace:
    """What the collectors read from a loaded version: its stats, scheduler and pipeline."""
    return SimpleNamespace(
        name=name,
        version=version,
        stats=ModelStats(name, str(version)),
        scheduler=None,
        pipeline=None,
        load_seconds=0.5,
        decoupled=False,
    )


class _OneGpuAndALabelledHostSeries:
    def collect(self):
        util = GaugeMetricFamily("nv_gpu_utilization", "GPU utilisation (0..1)", labels=["gpu"])
        util.add_metric(["0"], 0.25)
        used = GaugeMetricFamily("nv_gpu_memory_used_bytes", "GPU memory used", labels=["gpu"])
        used.add_metric(["0"], 2048)
        inflight = GaugeMetricFamily("ferry_inflight", "requests in flight", labels=["protocol"])
        inflight.add_metric(["http"], 3)
        inflight.add_metric(["grpc"], 1)
        yield from (util, used, inflight)


def test_snapshot_groups_counters_histograms_host_and_gpus() -> None:
    loaded = [_loaded("a", 1)]
    metrics = Metrics(lambda: loaded)
    gone = _loaded("gone", 3)  # attached, then unloaded: its histogram children stay in the registry
    metrics.attach(gone)
    gone.stats.record_success(1_000_000, 10_000)
    metrics.attach(loaded[0])
    metrics.registry.register(_OneGpuAndALabelledHostSeries())
    stats = loaded[0].stats
    for request_us in (80, 300, 300, 2_000):
        stats.record_success(request_us * 1000, 20_000)
    stats.record_execution(batch_size=3, requests=2, input_ns=1000, infer_ns=50_000, output_ns=2000)
    stats.record_execution(batch_size=1, requests=1, input_ns=1000, infer_ns=40_000, output_ns=2000)
    stats.record_failure(0, "REJECTED")

    snapshot = metrics_snapshot(metrics.registry)
    assert [m["name"] for m in snapshot["models"]] == ["a"]
    (entry,) = snapshot["models"]
    assert entry["version"] == "1"
    counters = entry["counters"]
    assert counters["nv_inference_request_success"] == 4
    assert counters["nv_inference_request_failure"] == {"REJECTED": 1, "CANCELED": 0, "BACKEND": 0, "OTHER": 0}
    assert counters["nv_inference_count"] == 4 and counters["nv_inference_exec_count"] == 2
    assert counters["nv_inference_queue_duration_us"] == 80
    latency = entry["histograms"]["nv_inference_request_duration_histogram_us"]
    assert latency["le"] == list(LATENCY_BUCKETS_US)
    cumulative = dict(zip(latency["le"], latency["buckets"], strict=True))
    assert (cumulative[50], cumulative[100], cumulative[250], cumulative[500], cumulative[2500]) == (0, 1, 1, 3, 4)
    assert latency["count"] == 4 and latency["sum"] == 80 + 300 + 300 + 2000
    batches = entry["histograms"]["nv_inference_batch_size"]
    assert batches["le"] == list(BATCH_BUCKETS) and batches["buckets"][:3] == [1, 1, 2] and batches["sum"] == 4
    assert 0 <= snapshot["host"]["nv_cpu_utilization"] <= 1
    assert snapshot["host"]["nv_cpu_memory_total_bytes"] > 0
    assert snapshot["gpus"] == [{"gpu": "0", "nv_gpu_utilization": 0.25, "nv_gpu_memory_used_bytes": 2048}]
    assert snapshot["host"]["ferry_inflight"] == {"http": 3, "grpc": 1}


def test_overview_of_an_unstarted_repository_in_none_mode() -> None:
    """Before anything loads every model is listed without versions; 'none' mode has no repository API."""
    overview = models_overview(DataPlane(ModelManager(MODEL_REPO, control_mode=ControlMode.NONE)))
    assert overview["control_mode"] == "none" and overview["repository_api"] is False
    assert {m["name"] for m in overview["models"]} >= {"digits", "digit_detector", "simple"}
    assert all(m["versions"] == [] for m in overview["models"])


def test_assets_ship_in_the_wheel_and_are_found_from_the_installed_package(tmp_path: Path) -> None:
    """Build the wheel, install it by unpacking (a pure wheel's install), and let Starlette find
    the static folder of that installed copy, not of this source tree."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("ferry-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert {f"ferry/dashboard/static/{name}" for name in STATIC_FILES} <= names
        archive.extractall(tmp_path / "site")
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import ferry.dashboard.routes as routes\n"
        "from starlette.staticfiles import StaticFiles\n"
        "assert routes.__file__.startswith(sys.argv[1]), routes.__file__\n"
        "assert b'dashboard/static/app.js' in routes.index_html()\n"
        "(folder,) = StaticFiles(packages=[routes.STATIC_PACKAGE]).all_directories\n"
        "print(folder)\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "site")], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert Path(found) == tmp_path / "site" / "ferry" / "dashboard" / "static"
    for name in STATIC_FILES:
        assert (Path(found) / name).is_file(), name
