"""Fixtures for the offline deployment checks: paths, YAML loading, a live /metrics scrape, and
PromQL analysis shared by the dashboard, prometheus-adapter and HPA tests."""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from tests.conftest import RunningServer

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKER = DEPLOY / "docker"
COMPOSE = DEPLOY / "compose"
KUBERNETES = DEPLOY / "kubernetes"

# Labels the scrape adds (Prometheus target labels, Prometheus Operator's Kubernetes labels); they are
# not in Ferry's /metrics output but may appear in queries.
TARGET_LABELS = frozenset({"instance", "job", "namespace", "pod", "service", "container", "endpoint", "node"})


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a file."""
    with path.open(encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc is not None]


def load_yaml(path: Path) -> Any:
    docs = load_yaml_documents(path)
    assert len(docs) == 1, f"{path}: expected one YAML document, found {len(docs)}"
    return docs[0]


@dataclass
class Scrape:
    """What a live Ferry exports: sample names with their label names."""

    labels: dict[str, set[str]] = field(default_factory=dict)
    text: str = ""

    def add(self, name: str, labels: set[str]) -> None:
        self.labels.setdefault(name, set()).update(labels)


def _families_to_scrape(scrape: Scrape, families: Any) -> None:
    for family in families:
        for sample in family.samples:
            scrape.add(sample.name, set(sample.labels))


@pytest.fixture(scope="session")
def live_metrics(server: RunningServer) -> Scrape:
    """A real /metrics scrape of the session's Ferry server after one inference on simple_fp32.

    GPU families only exist on machines with a GPU, so they are added from Ferry's own GPU
    collectors (NVML with a fake library, tegrastats with a fake reading): still the names the server
    code exports, not a hand-written list.
    """
    from prometheus_client.parser import text_string_to_metric_families

    from ferry.gpu.tegrastats import TegrastatsCollector, TegrastatsReader, parse_tegrastats
    from ferry.metrics import GpuCollector

    body = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [float(i) for i in range(16)]},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
            ]
        }
    ).encode()
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/simple_fp32/infer",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200
        outputs = json.loads(reply.read())["outputs"]
    assert {o["name"] for o in outputs} == {"OUTPUT0", "OUTPUT1"}

    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    scrape = Scrape(text=text)
    _families_to_scrape(scrape, text_string_to_metric_families(text))
    assert scrape.labels, "the scrape is empty"

    fake_nvml = SimpleNamespace(
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUtilizationRates=lambda handle: SimpleNamespace(gpu=50),
        nvmlDeviceGetMemoryInfo=lambda handle: SimpleNamespace(total=1 << 34, used=1 << 30),
        nvmlDeviceGetPowerUsage=lambda handle: 250_000,
    )
    _families_to_scrape(scrape, GpuCollector(fake_nvml).collect())
    reader = TegrastatsReader(1.0, ["unused"])
    reader._latest = (parse_tegrastats("RAM 2345/7620MB GR3D_FREQ 45% VDD_IN 5000mW/5000mW"), 0.0)
    _families_to_scrape(scrape, TegrastatsCollector(reader, max_age_s=float("inf")).collect())
    return scrape


# --- PromQL ----------------------------------------------------------------------------------

GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "${__rate_interval}": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "${__range}": "1h",
}
ADAPTER_TEMPLATES = {
    "<<.LabelMatchers>>": 'namespace="default",pod="ferry-0"',
    "<<.GroupBy>>": "pod",
}


def substitute(expr: str, table: dict[str, str]) -> str:
    for key in sorted(table, key=len, reverse=True):
        expr = expr.replace(key, table[key])
    return expr


@dataclass
class QueryUse:
    """Metric names a PromQL expression selects, and the label names it relies on, per metric."""

    metrics: set[str] = field(default_factory=set)
    matcher_labels: dict[str, set[str]] = field(default_factory=dict)
    grouping: list[tuple[set[str], set[str]]] = field(default_factory=list)
    """(labels of a by(...) clause, metrics aggregated under it)."""


def analyse_promql(expr: str) -> QueryUse:
    """Parse ``expr`` (raises ValueError on a syntax error) and collect what it selects."""
    promql_parser = pytest.importorskip("promql_parser", reason="promql-parser is not installed")
    use = QueryUse()

    def walk(node: Any) -> set[str]:
        if isinstance(node, promql_parser.VectorSelector):
            names = set()
            labels = set()
            for matcher in node.matchers.matchers:
                if matcher.name == "__name__":
                    names.add(matcher.value)
                else:
                    labels.add(matcher.name)
            if node.name:
                names.add(node.name)
            assert names, f"selector without a metric name in {expr!r}"
            for name in names:
                use.metrics.add(name)
                use.matcher_labels.setdefault(name, set()).update(labels)
            return names
        if isinstance(node, promql_parser.MatrixSelector):
            return walk(node.vector_selector)
        if isinstance(node, promql_parser.Call):
            return set().union(*(walk(arg) for arg in node.args)) if node.args else set()
        if isinstance(node, promql_parser.AggregateExpr):
            inner = walk(node.expr)
            if node.param is not None:
                inner |= walk(node.param)
            modifier = node.modifier
            if modifier is not None and modifier.type == promql_parser.AggModifierType.By:
                use.grouping.append((set(modifier.labels), set(inner)))
            return inner
        if isinstance(node, promql_parser.BinaryExpr):
            return walk(node.lhs) | walk(node.rhs)
        if isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr):
            return walk(node.expr)
        return set()  # number and string literals

    walk(promql_parser.parse(expr))
    return use


def promql_problems(expr: str, scrape: Scrape) -> list[str]:
    """Why ``expr`` would select nothing from a Ferry server: unknown metrics or labels."""
    try:
        use = analyse_promql(expr)
    except ValueError as exc:
        return [f"does not parse: {exc}"]
    problems = [
        f"{name}: no such series in Ferry's /metrics" for name in sorted(use.metrics) if name not in scrape.labels
    ]
    for name, labels in use.matcher_labels.items():
        unknown = labels - scrape.labels.get(name, set()) - TARGET_LABELS
        if name in scrape.labels and unknown:
            problems.append(f"{name} has no label {', '.join(sorted(unknown))}")
    for labels, metrics in use.grouping:
        known = set().union(*(scrape.labels.get(m, set()) for m in metrics)) if metrics else set()
        unknown = labels - known - TARGET_LABELS
        if unknown and metrics <= set(scrape.labels):
            problems.append(
                f"by ({', '.join(sorted(labels))}) over {', '.join(sorted(metrics))}: "
                f"no label {', '.join(sorted(unknown))}"
            )
    return problems


@pytest.fixture
def clean_ferry_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """An environment without FERRY_* variables, for checking option values with Settings."""
    for key in list(os.environ):
        if key.startswith("FERRY_"):
            monkeypatch.delenv(key)
    yield monkeypatch


def settings_from_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Any:
    """Ferry's Settings built from ``env`` exactly as the server would build them; unknown FERRY_*
    names fail (pydantic-settings would silently ignore them)."""
    from ferry.settings import Settings

    known = {f"FERRY_{name.upper()}" for name in Settings.model_fields}
    unknown = sorted(k for k in env if k.startswith("FERRY_") and k not in known)
    assert not unknown, f"not Ferry options: {unknown} (known: {sorted(known)})"
    for key, value in env.items():
        if key.startswith("FERRY_"):
            monkeypatch.setenv(key, str(value))
    return Settings()


@pytest.fixture(scope="session")
def cpu_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The CPU image built once per test run with podman, shared by the container and kube tests
    (a (Podman, BuiltImage) pair; the base image is kept for the next run, the image removed)."""
    from tests.deploy.podman import Podman, build_image, ensure_base_image, missing_tools

    why = missing_tools()
    if why is not None:
        pytest.skip(why)
    workdir = tmp_path_factory.mktemp("podman")
    podman = Podman.configured(workdir)
    ensure_base_image(podman, workdir)
    tag = f"localhost/ferry:cpu-test-{uuid.uuid4().hex[:8]}"  # runs side by side must not share a tag
    built = build_image(podman, ROOT, DOCKER / "Dockerfile.cpu", tag)
    print(f"\nCPU image {tag}: built in {built.seconds:.0f} s, {built.size_bytes / 1e6:.0f} MB")
    yield podman, built
    podman.run("rmi", "--force", tag, check=False)
