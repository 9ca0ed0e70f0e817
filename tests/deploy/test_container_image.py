"""The CPU image built and run for real with podman: non-root, read-only root filesystem, a passing
HEALTHCHECK, tritonclient over HTTP and gRPC through published ports, the dashboard, and SIGTERM
draining queued requests before exiting 0. Skips (with the reason) where podman is not installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from tests.conftest import MODEL_REPO, free_port
from tests.deploy.podman import BuiltImage, Podman, http_status, missing_tools
from tests.models import write_mlp_model

pytestmark = [
    pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools())),
    # The first test also pays for the base image (about 1 min) and the build (1-3 min, pip downloads).
    pytest.mark.timeout(1200),
]

WIDTH = 64
#: The "held" model's batcher waits this long for a batch of 16; the test sends 4 requests, so they
#: stay queued for this long: the state SIGTERM must drain (the drain itself waits this long too).
HOLD_S = 600  # the batcher holds requests until drained (SIGTERM makes it run them at once)
WAIT_S = 60  # generous bound for states to appear on a busy machine


@dataclass
class Container:
    podman: Podman
    name: str
    image: BuiltImage
    http: str
    grpc: str
    metrics: str

    def exec(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.podman.run("exec", self.name, *args, check=False)


@pytest.fixture(scope="module")
def image(cpu_image: tuple[Podman, BuiltImage]) -> tuple[Podman, BuiltImage]:
    """The session's CPU image (tests/deploy/conftest.py builds it once for this and the kube test)."""
    return cpu_image


@pytest.fixture(scope="module")
def container(image: tuple[Podman, BuiltImage], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    podman, built = image
    repo = tmp_path_factory.mktemp("container") / "models"
    shutil.copytree(MODEL_REPO / "simple", repo / "simple")
    write_mlp_model(
        repo / "held",
        width=WIDTH,
        layers=1,
        max_batch_size=16,
        extra_config=f"dynamic_batching {{ preferred_batch_size: [16] max_queue_delay_microseconds: {HOLD_S}000000 }}",
    )
    subprocess.run(["chmod", "-R", "a+rX", str(repo)], check=True)  # the image's user is uid 10001
    ports = {"8000": free_port(), "8001": free_port(), "8002": free_port()}
    name = f"ferry-test-{uuid.uuid4().hex[:8]}"
    published = [arg for inside, outside in ports.items() for arg in ("-p", f"127.0.0.1:{outside}:{inside}")]
    podman.run(
        "run",
        "--detach",
        "--name",
        name,
        "--read-only",
        *published,
        "-v",
        f"{repo}:/models:ro",
        "-e",
        "FERRY_EXIT_TIMEOUT_SECS=60",
        built.tag,
    )
    box = Container(
        podman, name, built, f"127.0.0.1:{ports['8000']}", f"127.0.0.1:{ports['8001']}", f"127.0.0.1:{ports['8002']}"
    )
    try:
        deadline = time.monotonic() + 180
        while http_status(f"http://{box.http}/v2/health/ready") != 200:
            state = podman.inspect("container", "inspect", name)["State"]
            assert state["Running"], podman.run("logs", name, check=False).stderr
            assert time.monotonic() < deadline, podman.run("logs", name, check=False).stderr
            time.sleep(0.2)
        yield box
    finally:
        podman.run("rm", "--force", "--time", "5", name, check=False)


def test_runs_as_non_root_on_a_read_only_root_filesystem(container: Container) -> None:
    assert container.exec("id", "-u").stdout.strip() == "10001"
    assert container.exec("sh", "-c", "grep ^Uid: /proc/1/status").stdout.split()[1] == "10001"  # the server
    written = container.exec("touch", "/opt/ferry/written")
    assert written.returncode != 0 and "Read-only file system" in written.stderr
    inspected = container.podman.inspect("container", "inspect", container.name)
    assert inspected["HostConfig"]["ReadonlyRootfs"] is True


def test_healthcheck_passes(container: Container) -> None:
    healthcheck = container.podman.inspect("image", "inspect", container.image.tag)["Healthcheck"]
    assert healthcheck["Test"][-1] == "/opt/ferry/healthcheck.py"
    checked = container.podman.run("healthcheck", "run", container.name, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_tritonclient_over_http_and_grpc_through_published_ports(container: Container) -> None:
    import tritonclient.grpc as tgrpc
    import tritonclient.http as thttp

    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    for module, url in ((thttp, container.http), (tgrpc, container.grpc)):
        client = module.InferenceServerClient(url)
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        client.close()


def test_dashboard_and_metrics_answer(container: Container) -> None:
    with urllib.request.urlopen(f"http://{container.http}/", timeout=10) as page:
        assert page.status == 200 and "<html" in page.read().decode().lower()
    with urllib.request.urlopen(f"http://{container.http}/dashboard/api/models", timeout=10) as models:
        assert "simple" in models.read().decode()
    with urllib.request.urlopen(f"http://{container.metrics}/metrics", timeout=10) as metrics:
        assert "nv_inference_request_success" in metrics.read().decode()


def _pending(container: Container) -> int:
    with urllib.request.urlopen(f"http://{container.metrics}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.search(r'^nv_inference_pending_request_count\{[^}]*model="held"[^}]*\} (\S+)$', text, re.M)
    return int(float(found.group(1))) if found else 0


def test_sigterm_drains_queued_requests_and_exits_0(container: Container) -> None:
    """Runs last in this module: it stops the container."""
    from ferry_client import HttpClient

    x = np.arange(WIDTH, dtype=np.float32)[None] / WIDTH
    answers: dict[int, np.ndarray | BaseException] = {}
    answered_at: dict[int, float] = {}

    def call(index: int) -> None:
        try:
            with HttpClient(container.http, timeout=120) as client:
                answers[index] = client.infer("held", {"x": x + index})["y"]
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            answers[index] = exc
        answered_at[index] = time.monotonic()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + WAIT_S
    while _pending(container) < 4:  # all four accepted and held in the batcher's queue
        assert time.monotonic() < deadline, "the requests did not reach the queue"
        time.sleep(0.05)
    signalled = time.monotonic()  # before the kill: draining answers at once, maybe before podman returns
    container.podman.run("kill", "--signal", "TERM", container.name)
    while http_status(f"http://{container.http}/v2/health/ready") == 200:  # readiness goes off while draining
        assert time.monotonic() < signalled + WAIT_S, "still ready after SIGTERM"
        time.sleep(0.05)
    for thread in threads:
        thread.join(120)
    for index in range(4):
        assert not isinstance(answers[index], BaseException), answers[index]
        np.testing.assert_allclose(answers[index], x + index, rtol=1e-6)
        assert answered_at[index] > signalled  # answered after the signal: it was in flight then
    exit_code = container.podman.run("wait", container.name, timeout=90).stdout.strip()
    logs = container.podman.run("logs", container.name, check=False)
    assert exit_code == "0", logs.stdout + logs.stderr
    assert "ferry stopped" in logs.stdout + logs.stderr
