"""The CPU overlay run for real with ``podman kube play``: its ConfigMap and Deployment (probes,
read-only root filesystem, non-root user, resource limits) start a pod that serves. The Service,
HPA, PDB and ServiceMonitor need a cluster; they stay schema-checked in test_kubernetes.py.

What the test changes in the rendered manifests, because podman is not a cluster: the image is the
locally built one, the model PersistentVolumeClaim becomes a hostPath holding one model, each
container port gets a hostPort so the host can reach it, one replica runs, and the Deployment gets a
name of its own (test runs side by side on one machine). Everything else (env from the ConfigMap,
securityContext, emptyDir /tmp, resources) is played as written.
Skips (with the reason) where podman or catatonit is not installed; reuses the session's CPU image.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.conftest import MODEL_REPO, free_port
from tests.deploy.podman import BuiltImage, Podman, http_status, missing_pod_tools
from tests.deploy.test_kubernetes import OVERLAYS, render

pytestmark = [
    pytest.mark.skipif(missing_pod_tools() is not None, reason=str(missing_pod_tools())),
    pytest.mark.timeout(1200),
]

WAIT_S = 120


@dataclass
class PlayedPod:
    podman: Podman
    container: str  # podman's name for the ferry container of the pod
    ports: dict[str, int]  # port name -> host port
    deployment: dict[str, Any]  # the manifest as played
    configmap: dict[str, Any]

    def url(self, port: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[port]}{path}"

    def exec(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.podman.run("exec", self.container, *args, check=False)


def _for_podman(deployment: dict[str, Any], image: str, models: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """The rendered Deployment with only what podman needs changed (see the module docstring)."""
    played = copy.deepcopy(deployment)
    played["metadata"]["name"] = f"ferry-{uuid.uuid4().hex[:8]}"  # runs side by side get their own pod
    played["spec"]["replicas"] = 1
    pod = played["spec"]["template"]["spec"]
    [container] = pod["containers"]
    container["image"] = image
    container["imagePullPolicy"] = "Never"
    ports = {}
    for port in container["ports"]:
        ports[port["name"]] = port["hostPort"] = free_port()
    for volume in pod["volumes"]:
        if "persistentVolumeClaim" in volume:
            del volume["persistentVolumeClaim"]
            volume["hostPath"] = {"path": str(models), "type": "Directory"}
    return played, ports


@pytest.fixture(scope="module")
def played(cpu_image: tuple[Podman, BuiltImage], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlayedPod]:
    podman, built = cpu_image
    docs = render(OVERLAYS["cpu"])
    configmap, deployment = docs[("ConfigMap", "ferry-config")], docs[("Deployment", "ferry")]
    work = tmp_path_factory.mktemp("kube")
    models = work / "models"
    shutil.copytree(MODEL_REPO / "simple", models / "simple")
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)  # the pod runs as uid 10001
    deployment, ports = _for_podman(deployment, built.tag, models)
    manifest = work / "ferry.yaml"
    manifest.write_text(yaml.safe_dump_all([configmap, deployment], sort_keys=False))
    report = podman.run("kube", "play", str(manifest), timeout=300).stdout
    # "Pod:\n<id>\nContainer:\n<id>": the one container of the one pod
    pod = PlayedPod(podman, report.split("Container:", 1)[1].split()[0], ports, deployment, configmap)
    try:
        deadline = time.monotonic() + WAIT_S
        while http_status(pod.url("http", "/v2/health/ready")) != 200:
            state = podman.inspect("container", "inspect", pod.container)["State"]
            logs = podman.run("logs", pod.container, check=False)
            assert state["Running"] and time.monotonic() < deadline, logs.stdout + logs.stderr
            time.sleep(0.5)
        yield pod
    finally:
        podman.run("kube", "down", str(manifest), check=False, timeout=120)


def test_every_probe_of_the_manifest_answers(played: PlayedPod) -> None:
    """The kubelet's view: each httpGet probe, on the port it names, answers 200 once started."""
    [container] = played.deployment["spec"]["template"]["spec"]["containers"]
    probes = {kind: container[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {probe["path"] for probe in probes.values()} == {"/v2/health/ready", "/v2/health/live"}
    for kind, probe in probes.items():
        assert http_status(played.url(probe["port"], probe["path"])) == 200, kind


def test_the_configmap_configures_the_server(played: PlayedPod) -> None:
    env = dict(line.split("=", 1) for line in played.exec("env").stdout.splitlines() if "=" in line)
    for key, value in played.configmap["data"].items():
        assert env.get(key) == str(value), key
    assert env["FERRY_STRICT_READINESS"] == "true"
    with urllib.request.urlopen(played.url("metrics", "/metrics"), timeout=10) as reply:
        assert b"nv_inference_request_success" in reply.read()


def test_read_only_root_filesystem_and_non_root_user(played: PlayedPod) -> None:
    assert played.exec("id", "-u").stdout.strip() == "10001"
    refused = played.exec("touch", "/ferry-was-here")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    assert played.exec("touch", "/tmp/scratch").returncode == 0  # the emptyDir
    assert played.exec("touch", "/models/simple/x").returncode != 0  # mounted read-only


def test_resource_limits_reach_the_container(played: PlayedPod) -> None:
    [container] = played.deployment["spec"]["template"]["spec"]["containers"]
    limits = container["resources"]["limits"]
    host = played.podman.inspect("container", "inspect", played.container)["HostConfig"]
    quota_cores = host["CpuQuota"] / host["CpuPeriod"] if host.get("CpuPeriod") else host["NanoCpus"] / 1e9
    assert quota_cores == float(limits["cpu"])
    assert host["Memory"] == 8 * 1024**3 and limits["memory"] == "8Gi"
    # and Ferry reads the quota there: its thread pools are sized from it (ferry.cores)
    seen = played.exec("python", "-c", "from ferry.cores import cpu_quota; print(cpu_quota())")
    assert seen.returncode == 0 and float(seen.stdout) == float(limits["cpu"]), seen.stderr


def test_the_pod_serves_inference(played: PlayedPod) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{played.ports['http']}")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)
