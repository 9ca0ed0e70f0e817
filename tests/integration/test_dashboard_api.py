"""The dashboard's HTTP side against a running server: the page and its packaged assets, and JSON
endpoints whose numbers agree with the statistics API and the repository index."""

from __future__ import annotations

import re

import httpx
import pytest

from ..conftest import MODEL_REPO, start_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_page_and_every_asset_it_loads_are_served(server) -> None:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        references = re.findall(r'(?:src|href)="([^"#][^"]*)"', page.text)
        assets = [ref for ref in references if not ref.startswith("data:")]
        assert not [ref for ref in assets if "//" in ref], "the page must load nothing from another origin"
        scripts = [ref for ref in assets if ref.endswith(".js")]
        assert "dashboard/static/app.js" in scripts
        app = client.get("/dashboard/static/app.js").text
        scripts += [f"dashboard/static/{name}" for name in re.findall(r'from "\./([\w.]+\.js)"', app)]
        for ref in set(assets + scripts):
            response = client.get("/" + ref)
            assert response.status_code == 200, ref
            expected = "javascript" if ref.endswith(".js") else "text/css"
            assert expected in response.headers["content-type"], (ref, response.headers["content-type"])
        missing = client.get("/dashboard/static/nope.js")
        assert missing.status_code == 404 and "error" in missing.json()


def _model(snapshot: dict, name: str) -> dict:
    (entry,) = [m for m in snapshot["models"] if m["name"] == name]
    return entry


def test_metrics_snapshot_agrees_with_the_statistics_api(server, digit_pngs) -> None:
    files, _ = digit_pngs
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        for data in files[:5]:
            assert client.post("/v2/models/digits/classify", content=data).status_code == 200
        batch = [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(files[5:17])]
        assert client.post("/v2/models/digits/classify", files=batch).status_code == 200
        assert client.post("/v2/models/digits/classify", content=b"not an image").status_code == 400
        snapshot = client.get("/dashboard/api/metrics").json()
        (stats,) = client.get("/v2/models/digits/stats").json()["model_stats"]

    digits = _model(snapshot, "digits")
    counters, histograms = digits["counters"], digits["histograms"]
    inference = stats["inference_stats"]
    assert digits["version"] == stats["version"] == "1"
    assert counters["nv_inference_request_success"] == inference["success"]["count"] >= 6
    assert sum(counters["nv_inference_request_failure"].values()) == inference["fail"]["count"] >= 1
    assert counters["nv_inference_request_failure"]["OTHER"] >= 1
    assert counters["nv_inference_count"] == stats["inference_count"] >= 17
    assert counters["nv_inference_exec_count"] == stats["execution_count"]
    for counter, key in (
        ("nv_inference_queue_duration_us", "queue"),
        ("nv_inference_compute_infer_duration_us", "compute_infer"),
        ("nv_inference_request_duration_us", "success"),
    ):
        assert counters[counter] == pytest.approx(inference[key]["ns"] / 1000)

    latency = histograms["nv_inference_request_duration_histogram_us"]
    assert latency["count"] == inference["success"]["count"]
    assert latency["buckets"] == sorted(latency["buckets"]) and latency["buckets"][-1] <= latency["count"]
    assert len(latency["le"]) == len(latency["buckets"]) and latency["le"] == sorted(latency["le"])
    batches = histograms["nv_inference_batch_size"]
    assert batches["count"] == stats["execution_count"]
    executed_items = sum(row["batch_size"] * row["compute_infer"]["count"] for row in stats["batch_stats"])
    assert batches["sum"] == executed_items == stats["inference_count"]

    assert 0 <= snapshot["host"]["nv_cpu_utilization"] <= 1
    assert 0 < snapshot["host"]["nv_cpu_memory_used_bytes"] < snapshot["host"]["nv_cpu_memory_total_bytes"]
    assert snapshot["host"]["ferry_process_resident_memory_bytes"] > 0
    assert isinstance(snapshot["gpus"], list)


def test_models_overview_matches_the_repository_index(server) -> None:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client:
        overview = client.get("/dashboard/api/models").json()
        index = client.post("/v2/repository/index").json()
        config = client.get("/v2/models/digits/config").json()
    assert overview["control_mode"] == "explicit" and overview["repository_api"] is True
    states = {(m["name"], v["version"]): v["state"] for m in overview["models"] for v in m["versions"]}
    assert states == {(row["name"], row["version"]): row["state"] for row in index}
    models = {m["name"]: m["versions"][0] for m in overview["models"]}
    digits = models["digits"]
    assert digits["platform"] == config["platform"] == "onnxruntime_onnx"
    assert digits["max_batch_size"] == config["max_batch_size"] == 64
    assert digits["dynamic_batching"] == {"max_queue_delay_us": 500, "preferred_batch_sizes": []}
    assert digits["instances"] == [{"name": "digits_0_0", "kind": "CPU", "device": "cpu"}]
    assert (digits["task"], models["digit_detector"]["task"], models["simple"]["task"]) == ("classify", "detect", None)
    assert models["fixed_nobatch"]["max_batch_size"] == 0 and models["fixed_nobatch"]["dynamic_batching"] is None


def test_no_dashboard_flag(tmp_path) -> None:
    """--no-dashboard serves neither the page nor its endpoints; the V2 API is unaffected."""
    off = start_server(MODEL_REPO, tmp_path / "off.log", "--no-dashboard", "--model-control-mode", "explicit")
    try:
        with httpx.Client(base_url=f"http://{off.http_url}", timeout=30) as client:
            assert client.get("/").status_code == 404
            assert client.get("/dashboard/api/metrics").status_code == 404
            assert client.get("/v2/health/ready").status_code == 200
    finally:
        assert off.stop() == 0
