"""docker compose stack and Grafana dashboard, checked without Docker: the compose-spec JSON schema,
the files the stack mounts, Prometheus/Grafana wiring, and every dashboard query against a real
/metrics scrape of Ferry."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import (
    COMPOSE,
    GRAFANA_VARIABLES,
    ROOT,
    Scrape,
    load_yaml,
    promql_problems,
    settings_from_env,
    substitute,
)

BASE_FILE = COMPOSE / "docker-compose.yml"
GPU_FILE = COMPOSE / "docker-compose.gpu.yml"
DASHBOARD = COMPOSE / "grafana" / "dashboards" / "ferry.json"


def compose_schema() -> dict[str, Any]:
    """The compose-spec schema that check-jsonschema ships (vendor.compose-spec)."""
    pytest.importorskip("check_jsonschema", reason="check-jsonschema (ships the compose-spec schema) is not installed")
    from importlib.resources import files

    return json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())


_VARIABLE = re.compile(r"\$(?:\$|\{(\w+)(?:(:?[-?+])([^}]*))?\}|(\w+))")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable interpolation (${VAR}, ${VAR:-default}, ${VAR-default}, $VAR, $$)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, argument = match.group(2), match.group(3) or ""
        current = env.get(name)
        if operator == ":-":
            return current if current else argument
        if operator == "-":
            return current if current is not None else argument
        if operator in (":?", "?"):
            assert current, f"${{{name}}} is required: {argument}"
            return current
        if operator in (":+", "+"):
            return argument if current else ""
        return current or ""

    return _VARIABLE.sub(replace, value)


def load_compose(path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    return interpolate(load_yaml(path), env or {})


def _volume_target(volume: str | dict[str, Any]) -> str:
    return volume["target"] if isinstance(volume, dict) else volume.split(":")[1]


def merge_compose(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`docker compose -f base -f override` for the keys these files use (volumes merge by target)."""
    merged = copy.deepcopy(base)
    for name, service in override.get("services", {}).items():
        target = merged.setdefault("services", {}).setdefault(name, {})
        for key, value in service.items():
            if key == "volumes":
                by_target = {_volume_target(v): v for v in target.get("volumes", [])}
                by_target.update({_volume_target(v): v for v in value})
                target["volumes"] = list(by_target.values())
            elif isinstance(value, dict) and isinstance(target.get(key), dict):
                target[key] = {**target[key], **value}
            else:
                target[key] = value
    return merged


@pytest.mark.parametrize("path", [BASE_FILE, GPU_FILE], ids=lambda p: p.name)
def test_compose_files_follow_the_compose_spec(path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    validator = jsonschema.Draft202012Validator(compose_schema())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(load_compose(path))]
    assert not errors, "\n".join(errors)


def test_gpu_override_merged_follows_the_compose_spec() -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    merged = merge_compose(load_compose(BASE_FILE), load_compose(GPU_FILE))
    jsonschema.validate(merged, compose_schema(), cls=jsonschema.Draft202012Validator)
    ferry = merged["services"]["ferry"]
    assert ferry["build"]["dockerfile"] == "deploy/docker/Dockerfile.cuda"
    devices = ferry["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    models = [v for v in ferry["volumes"] if _volume_target(v) == "/models"]
    assert len(models) == 1 and not models[0].endswith(":ro"), "TensorRT caches need a writable repository"


def test_ferry_service(clean_ferry_env: pytest.MonkeyPatch) -> None:
    compose = load_compose(BASE_FILE)
    ferry = compose["services"]["ferry"]
    context = (COMPOSE / ferry["build"]["context"]).resolve()
    assert context == ROOT, "the build context is the repository root"
    assert (context / ferry["build"]["dockerfile"]).is_file()
    assert {p.split(":")[-1] for p in ferry["ports"]} == {"8000", "8001", "8002"}
    settings = settings_from_env(clean_ferry_env, {k: str(v) for k, v in ferry["environment"].items()})
    assert str(settings.model_repository) == "/models"
    assert settings.host == "0.0.0.0"
    grace = int(ferry["stop_grace_period"].removesuffix("s"))
    assert grace > settings.exit_timeout_secs, "Docker must not kill Ferry while it drains"
    assert ferry.get("read_only") is True and "/tmp" in ferry["tmpfs"]
    source, target, *_ = ferry["volumes"][0].split(":")
    assert target == "/models" and (COMPOSE / source).resolve() == ROOT / "model_repo"


def test_bind_mounts_exist() -> None:
    for name, service in load_compose(BASE_FILE)["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE / source).exists(), f"{name}: {source} does not exist"


def test_prometheus_scrapes_ferry() -> None:
    compose = load_compose(BASE_FILE)
    prometheus = compose["services"]["prometheus"]
    config_mount = next(v for v in prometheus["volumes"] if v.split(":")[1] == "/etc/prometheus/prometheus.yml")
    config = load_yaml(COMPOSE / config_mount.split(":")[0])
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for sc in jobs["ferry"]["static_configs"] for t in sc["targets"]]
    assert targets == ["ferry:8002"]
    assert jobs["ferry"].get("metrics_path", "/metrics") == "/metrics"
    host, port = targets[0].split(":")
    assert host in compose["services"]
    assert f"{port}:{port}" in compose["services"][host]["ports"]


def test_grafana_provisioning() -> None:
    compose = load_compose(BASE_FILE)
    grafana = compose["services"]["grafana"]
    mounts = {v.split(":")[1]: COMPOSE / v.split(":")[0] for v in grafana["volumes"] if v.startswith(".")}
    provisioning = mounts["/etc/grafana/provisioning"]
    datasources = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert len(datasources) == 1 and datasources[0]["type"] == "prometheus"
    url = datasources[0]["url"]
    assert url == "http://prometheus:9090" and "9090:9090" in compose["services"]["prometheus"]["ports"]
    providers = load_yaml(provisioning / "dashboards" / "ferry.yml")["providers"]
    path = providers[0]["options"]["path"]
    assert mounts[path] == DASHBOARD.parent, "the provider reads the mounted dashboards folder"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (mounts[path] / Path(home).relative_to(path)).is_file()


# --- dashboard -----------------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # collapsed rows keep their panels inside
    return found


def dashboard_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    queries = []
    for panel in panels(board):
        for target in panel.get("targets", []):
            queries.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
        assert match, f"variable {variable['name']}: expected label_values(selector, label)"
        queries.append((f"variable {variable['name']}", f"count by ({match.group(2)}) ({match.group(1)})"))
    return queries


def test_dashboard_structure() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] == "Ferry"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in board["templating"]["list"]}
    occupied: set[tuple[int, int]] = set()
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"{panel['title']} has no query"
        for ref in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]:
            assert ref["type"] == "prometheus"
            assert ref["uid"].strip("${}") in variables, f"{panel['title']}: datasource variable"
        for target in panel["targets"]:
            used = set(re.findall(r"\$\{?(\w+)", target["expr"]))
            assert used <= variables | {"__rate_interval", "__range", "__interval"}, used


def test_dashboard_covers_the_issue_panels() -> None:
    exprs = " ".join(expr for _, expr in dashboard_queries(dashboard()))
    for needed in (
        "nv_inference_request_success",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_histogram_us_bucket",
        "nv_inference_queue_duration_histogram_us_bucket",
        "nv_inference_batch_size_bucket",
        "nv_inference_request_failure",
        "nv_gpu_utilization",
        "nv_gpu_memory_used_bytes",
        "nv_cpu_utilization",
        "ferry_process_resident_memory_bytes",
    ):
        assert needed in exprs, needed
    for quantile in ("0.5", "0.95", "0.99"):
        assert (
            f"histogram_quantile({quantile}, sum by (le) (rate(nv_inference_request_duration_histogram_us_bucket"
            in exprs
        )
    assert "sum by (model, reason) (rate(nv_inference_request_failure" in exprs


def test_dashboard_queries_select_what_ferry_exports(live_metrics: Scrape) -> None:
    problems = []
    for where, expr in dashboard_queries(dashboard()):
        problems.extend(f"{where}: {p}" for p in promql_problems(substitute(expr, GRAFANA_VARIABLES), live_metrics))
    assert not problems, "\n".join(problems)


def test_promql_check_catches_mistakes(live_metrics: Scrape) -> None:
    """The check itself: a wrong name, a _total suffix, a wrong label and bad syntax are all caught."""
    assert promql_problems("rate(nv_inference_request_success[1m])", live_metrics) == []
    assert promql_problems("rate(nv_inference_request_success_total[1m])", live_metrics)
    assert promql_problems("sum by (le) (rate(nv_inference_request_duration_histogram_us[1m]))", live_metrics)
    assert promql_problems('nv_inference_count{modell="x"}', live_metrics)
    assert promql_problems("sum by (reason) (rate(nv_inference_count[1m]))", live_metrics)
    assert promql_problems("sum(rate(nv_inference_count[1m]", live_metrics)
