"""Kubernetes manifests, checked without a cluster: kubernetes-validate (OpenAPI schemas, strict) on
every base document and on the rendered overlays, structural checks for the CRDs it does not know
(ServiceMonitor, ServingRuntime, InferenceService), cross-references between the objects, and the
autoscaling metric against a real /metrics scrape of Ferry."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import kustomize_lite
from tests.deploy.conftest import (
    ADAPTER_TEMPLATES,
    KUBERNETES,
    Scrape,
    analyse_promql,
    load_yaml,
    load_yaml_documents,
    promql_problems,
    settings_from_env,
    substitute,
)

# The oldest Kubernetes these manifests target, and the newest schemas kubernetes-validate has.
OLDEST_KUBERNETES = "1.29.0"
CRD_KINDS = {"ServiceMonitor", "ServingRuntime", "InferenceService"}
OVERLAYS = {"cpu": KUBERNETES / "overlays" / "cpu", "gpu": KUBERNETES / "overlays" / "gpu"}
LABELS = {"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": "server"}


def kubernetes_validate() -> Any:
    return pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")


def k8s_versions() -> list[str]:
    return sorted({OLDEST_KUBERNETES, kubernetes_validate().latest_version()})


def validate_core(doc: dict[str, Any], where: str) -> None:
    """Strict OpenAPI validation (unknown fields fail) against the oldest and newest Kubernetes."""
    kv = kubernetes_validate()
    assert doc.get("kind") not in CRD_KINDS
    for version in k8s_versions():
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:
            path = "/".join(map(str, exc.path))
            raise AssertionError(f"{where}: Kubernetes {version}: {path}: {exc.message}") from None


def validate_container(container: dict[str, Any], where: str) -> None:
    """A container embedded in a custom resource, validated as part of a Pod."""
    validate_core(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": {"containers": [container]}}, where
    )


# --- kustomizations and single documents ---------------------------------------------------------


def kustomization_folders() -> list[Path]:
    return sorted(p.parent for p in KUBERNETES.rglob("kustomization.yaml"))


@pytest.mark.parametrize("folder", kustomization_folders(), ids=lambda p: p.relative_to(KUBERNETES).as_posix())
def test_kustomization_lists_existing_files_only(folder: Path) -> None:
    kustomization = load_yaml(folder / "kustomization.yaml")
    listed = set()
    for entry in kustomization.get("resources", []) + kustomization.get("components", []):
        path = (folder / entry).resolve()
        assert path.exists(), f"{entry} does not exist"
        if path.is_dir():
            assert (path / "kustomization.yaml").is_file(), f"{entry} is not a kustomization"
        listed.add(path)
    for entry in kustomization.get("patches", []):
        path = (folder / entry["path"]).resolve()
        assert path.is_file(), f"patch {entry['path']} does not exist"
        listed.add(path)
    # ... and every manifest in the folder is used (an unlisted file is an easy mistake).
    for path in folder.glob("*.yaml"):
        assert path.name == "kustomization.yaml" or path.resolve() in listed, f"{path.name} is not listed"


def base_documents() -> list[tuple[str, dict[str, Any]]]:
    base = KUBERNETES / "base"
    docs = []
    for entry in load_yaml(base / "kustomization.yaml")["resources"]:
        for index, doc in enumerate(load_yaml_documents(base / entry)):
            docs.append((f"base/{entry}#{index}", doc))
    return docs


@pytest.mark.parametrize(("where", "doc"), base_documents(), ids=[w for w, _ in base_documents()])
def test_base_document_validates(where: str, doc: dict[str, Any]) -> None:
    if doc["kind"] in CRD_KINDS:
        check_custom_resource(doc, where)
    else:
        validate_core(doc, where)


# --- rendered overlays ---------------------------------------------------------------------------


def render(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in kustomize_lite.build(folder)}


def overlay_folder(name: str, tmp_path: Path) -> Path:
    """The folder to build: an overlay, or the CPU overlay plus the model-init component."""
    if name != "cpu+model-init":
        return OVERLAYS[name]
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(OVERLAYS["cpu"], tmp_path)],  # kustomize refuses absolute roots
                "components": [os.path.relpath(KUBERNETES / "components" / "model-init", tmp_path)],
            }
        )
    )
    return tmp_path


VARIANTS = ["cpu", "gpu", "cpu+model-init"]


@pytest.fixture(params=VARIANTS)
def overlay(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[tuple[str, str], dict[str, Any]]]:
    return request.param, render(overlay_folder(request.param, tmp_path))


def test_rendered_overlay_validates(overlay: tuple[str, dict[tuple[str, str], dict[str, Any]]]) -> None:
    name, docs = overlay
    expected = {
        ("ConfigMap", "ferry-config"),
        ("Deployment", "ferry"),
        ("Service", "ferry"),
        ("HorizontalPodAutoscaler", "ferry"),
        ("PodDisruptionBudget", "ferry"),
        ("ServiceMonitor", "ferry"),
    }
    assert expected <= set(docs)
    for (kind, resource), doc in docs.items():
        if kind in CRD_KINDS:
            check_custom_resource(doc, f"{name}: {kind}/{resource}")
        else:
            validate_core(doc, f"{name}: {kind}/{resource}")


def _pod(docs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return docs[("Deployment", "ferry")]["spec"]["template"]


def _ferry_container(docs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    containers = _pod(docs)["spec"]["containers"]
    assert [c["name"] for c in containers] == ["ferry"]
    return containers[0]


def _configmap_env(docs: dict[tuple[str, str], dict[str, Any]], container: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(docs[("ConfigMap", source["configMapRef"]["name"])]["data"])
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def test_deployment_configuration(
    overlay: tuple[str, dict[tuple[str, str], dict[str, Any]]], clean_ferry_env: pytest.MonkeyPatch
) -> None:
    name, docs = overlay
    deployment = docs[("Deployment", "ferry")]
    pod = _pod(docs)
    container = _ferry_container(docs)

    assert deployment["spec"]["selector"]["matchLabels"] == LABELS
    assert LABELS.items() <= pod["metadata"]["labels"].items()
    assert re.fullmatch(r"[\w.\-/]+/ferry:[\w.\-]+", container["image"]), container["image"]
    assert container["image"].endswith("-cuda" if name == "gpu" else "-cpu")

    settings = settings_from_env(clean_ferry_env, _configmap_env(docs, container))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": settings.http_port, "grpc": settings.grpc_port, "metrics": settings.metrics_port}
    assert settings.host == "0.0.0.0"
    assert settings.strict_readiness, "the readiness probe must fail while a model is not READY"

    probes = {kind: container[kind] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert probes["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    for probe in probes.values():
        assert probe["httpGet"]["port"] in ports
    startup = probes["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= (1800 if name == "gpu" else 600)

    # Shutdown: the endpoint leaves the Service during the preStop sleep, then Ferry drains.
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > int(pre_stop[1]) + settings.exit_timeout_secs

    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 10001
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]

    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for spec in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        for mount in spec.get("volumeMounts", []):
            assert mount["name"] in volumes, f"{spec['name']} mounts unknown volume {mount['name']}"
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]], "read-only root: /tmp must be writable"
    models = volumes[mounts[str(settings.model_repository)]["name"]]
    if name == "cpu+model-init":
        assert set(models) == {"name", "emptyDir"}
        init = pod["spec"]["initContainers"]
        assert any(m["mountPath"] == str(settings.model_repository) for m in init[0]["volumeMounts"])
        assert ("PersistentVolumeClaim", "ferry-models") not in docs
    else:
        assert docs[("PersistentVolumeClaim", models["persistentVolumeClaim"]["claimName"])]

    gpus = container["resources"].get("limits", {}).get("nvidia.com/gpu")
    if name == "gpu":
        assert gpus == "1" and container["resources"]["requests"]["nvidia.com/gpu"] == "1"
        assert any(t["key"] == "nvidia.com/gpu" for t in pod["spec"]["tolerations"])
    else:
        assert gpus is None
        # Engines size their thread pools from the CPU limit (ferry.cores): it must be set, in whole
        # cores, and equal to the request so the pod is not throttled below what they planned for.
        cpu = {kind: container["resources"][kind].get("cpu") for kind in ("requests", "limits")}
        assert cpu["limits"] is not None and cpu["limits"].isdigit(), cpu
        assert cpu["requests"] == cpu["limits"], cpu


def test_service_pdb_hpa_and_servicemonitor_match(overlay: tuple[str, dict[tuple[str, str], dict[str, Any]]]) -> None:
    _, docs = overlay
    pod_labels = _pod(docs)["metadata"]["labels"]
    port_names = {p["name"] for p in _ferry_container(docs)["ports"]}

    service = docs[("Service", "ferry")]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert {p["targetPort"] for p in service_ports.values()} <= port_names
    assert service_ports["grpc"]["appProtocol"] == "grpc"
    assert {n: p["port"] for n, p in service_ports.items()} == {"http": 8000, "grpc": 8001, "metrics": 8002}

    pdb = docs[("PodDisruptionBudget", "ferry")]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    hpa = docs[("HorizontalPodAutoscaler", "ferry")]
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", "ferry")
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["maxUnavailable"], "a drain never empties the Service"
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Pods"]

    monitor = docs[("ServiceMonitor", "ferry")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]


@pytest.mark.parametrize("name", VARIANTS)
def test_real_kustomize_build_agrees(name: str, tmp_path: Path) -> None:
    """Where a kustomize binary exists (kubectl has one built in), compare with the real thing."""
    kustomize, kubectl = shutil.which("kustomize"), shutil.which("kubectl")
    if kustomize is None and kubectl is None:
        pytest.skip("neither kustomize nor kubectl is installed")
    folder = overlay_folder(name, tmp_path)
    command = [kustomize, "build", str(folder)] if kustomize else [kubectl, "kustomize", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    real = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(result.stdout) if d}
    assert real == render(folder), "kustomize_lite renders differently from kustomize"
    for key, doc in real.items():
        if key[0] not in CRD_KINDS:
            validate_core(doc, f"kustomize build {name}: {key}")


# --- custom resources ----------------------------------------------------------------------------


def check_custom_resource(doc: dict[str, Any], where: str) -> None:
    """kubernetes-validate has no schemas for CRDs: check the fields these manifests rely on."""
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"]), where
    kind = doc["kind"]
    spec = doc["spec"]
    if kind == "ServiceMonitor":
        assert doc["apiVersion"] == "monitoring.coreos.com/v1", where
        assert set(spec) <= {
            "selector",
            "endpoints",
            "namespaceSelector",
            "jobLabel",
            "targetLabels",
            "podTargetLabels",
            "sampleLimit",
        }, where
        assert spec["selector"]["matchLabels"], where
        for endpoint in spec["endpoints"]:
            assert set(endpoint) <= {
                "port",
                "path",
                "interval",
                "scrapeTimeout",
                "scheme",
                "honorLabels",
                "relabelings",
                "metricRelabelings",
            }, where
            assert endpoint["port"] and endpoint.get("path", "/metrics").startswith("/")
            for key in ("interval", "scrapeTimeout"):
                if key in endpoint:
                    assert re.fullmatch(r"\d+(ms|s|m|h)", endpoint[key]), f"{where}: {key}"
    elif kind == "ServingRuntime":
        assert doc["apiVersion"] == "serving.kserve.io/v1alpha1", where
        assert spec["supportedModelFormats"] and all(f["name"] for f in spec["supportedModelFormats"])
        assert set(spec["protocolVersions"]) <= {"v1", "v2", "grpc-v1", "grpc-v2"}, where
        assert spec["containers"], where
        for container in spec["containers"]:
            validate_container(container, f"{where}: container {container['name']}")
    elif kind == "InferenceService":
        assert doc["apiVersion"] == "serving.kserve.io/v1beta1", where
        model = spec["predictor"]["model"]
        assert model["modelFormat"]["name"] and model["runtime"], where
        assert re.fullmatch(r"[a-z0-9]+://.+", model["storageUri"]), where
        validate_container(
            {"name": "kserve-container", "image": "placeholder", "resources": model["resources"]},
            f"{where}: predictor resources",
        )
    else:
        raise AssertionError(f"{where}: no check for {kind}")


def kserve_documents() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted((KUBERNETES / "kserve").glob("*.yaml")):
        for doc in load_yaml_documents(path):
            assert doc["kind"] not in docs
            docs[doc["kind"]] = doc
    return docs


def test_kserve_example(clean_ferry_env: pytest.MonkeyPatch) -> None:
    docs = kserve_documents()
    assert set(docs) == {"ServingRuntime", "InferenceService"}
    for kind, doc in docs.items():
        check_custom_resource(doc, f"kserve {kind}")
    runtime, isvc = docs["ServingRuntime"], docs["InferenceService"]
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["protocolVersion"] == "v2" and "v2" in runtime["spec"]["protocolVersions"]

    container = runtime["spec"]["containers"][0]
    assert container["name"] == "kserve-container"
    assert container["image"].endswith("-cpu"), "the CPU image"
    settings = settings_from_env(clean_ferry_env, {e["name"]: e["value"] for e in container["env"]})
    assert str(settings.model_repository) == "/mnt/models", "where KServe's storage initializer puts the model"
    assert settings.strict_readiness, "the readiness probe must fail while a model is not READY"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http1"] == settings.http_port
    assert "grpc-v2" in runtime["spec"]["protocolVersions"]
    assert ports["h2c"] == settings.grpc_port, "the gRPC port protocolVersions promises is exposed"
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": settings.http_port}
    annotations = runtime["spec"]["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == settings.metrics_port


# --- autoscaling metric --------------------------------------------------------------------------


def adapter_rules() -> list[dict[str, Any]]:
    values = load_yaml(KUBERNETES / "prometheus-adapter" / "rules.yaml")
    assert values["rules"]["default"] is False
    return values["rules"]["custom"]


def test_adapter_rules_select_what_ferry_exports(live_metrics: Scrape) -> None:
    problems = []
    for rule in adapter_rules():
        name = rule["name"]["as"]
        series = analyse_promql(rule["seriesQuery"]).metrics
        assert len(series) == 1, f"{name}: seriesQuery selects one metric"
        assert re.search(rule["name"]["matches"], next(iter(series))), f"{name}: name.matches misses the series"
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
        for label, override in rule["resources"]["overrides"].items():
            assert override["resource"] == label
        for field in ("seriesQuery", "metricsQuery"):
            expr = substitute(rule[field], ADAPTER_TEMPLATES)
            problems.extend(f"{name} {field}: {p}" for p in promql_problems(expr, live_metrics))
    assert not problems, "\n".join(problems)


def test_queue_time_metric_is_queue_over_requests() -> None:
    rule = next(r for r in adapter_rules() if r["name"]["as"] == "ferry_queue_time_us_per_request")
    query = substitute(rule["metricsQuery"], ADAPTER_TEMPLATES)
    assert re.search(r"rate\(nv_inference_queue_duration_us\{[^}]*\}\[\w+\]\)\)\s*/", query), query
    assert "rate(nv_inference_request_success{" in query.split("/", 1)[1]


@pytest.mark.parametrize("name", list(OVERLAYS))
def test_hpa_metric_is_served_by_the_adapter(name: str) -> None:
    served = {rule["name"]["as"] for rule in adapter_rules()}
    hpa = render(OVERLAYS[name])[("HorizontalPodAutoscaler", "ferry")]
    for metric in hpa["spec"]["metrics"]:
        assert metric["pods"]["metric"]["name"] in served
        assert metric["pods"]["target"]["type"] == "AverageValue"
