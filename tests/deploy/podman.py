"""Building and running Ferry's container images with Debian's podman, on a machine that reaches no
image registry (docs/deploy.md, "Building the CPU image without a registry").

- The base image is made locally: ``mmdebstrap`` builds a Debian root filesystem from the machine's
  own apt sources and ``podman import`` turns it into an image, passed to the Dockerfile as the
  ``PYTHON_IMAGE`` build argument (the Dockerfile's default stays the official python image).
- pip inside the build reaches the package index only with the machine's pip configuration and CA
  bundle, so those files are mounted read-only into the build, never copied into the project.
- podman's defaults fail on such machines (crun with hybrid cgroups, raising RLIMIT_NOFILE), so a
  containers.conf with runc, cgroupfs and no default ulimits is used unless CONTAINERS_CONF is set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BASE_IMAGE = "localhost/ferry-test-base:bookworm"
BASE_PACKAGES = "python3,python3-venv,python3-pip,python-is-python3,passwd,ca-certificates"
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""


def missing_tools() -> str | None:
    """Why images cannot be built and run here, or None when they can."""
    for tool in ("podman", "mmdebstrap", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install podman runc mmdebstrap)"
    if not any(path.is_file() for path in APT_SOURCES):
        return "no apt sources file for mmdebstrap"
    return None


def missing_pod_tools() -> str | None:
    """Why pods (``podman kube play``) cannot run here, or None: besides the image tools, podman
    builds its pause image from catatonit, a package podman only recommends."""
    missing = missing_tools()
    if missing is None and shutil.which("catatonit") is None:
        return "catatonit is not installed (apt-get install catatonit): podman needs it for a pod's pause image"
    return missing


@dataclass
class Podman:
    """Runs podman with a containers.conf that works on these machines."""

    env: dict[str, str]

    @classmethod
    def configured(cls, workdir: Path) -> Podman:
        env = dict(os.environ)
        if "CONTAINERS_CONF" not in env:
            conf = workdir / "containers.conf"
            conf.write_text(CONTAINERS_CONF)
            env["CONTAINERS_CONF"] = str(conf)
        return cls(env)

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def image_exists(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0

    def inspect(self, *args: str) -> dict:
        return json.loads(self.run(*args).stdout)[0]


def ensure_base_image(podman: Podman, workdir: Path) -> None:
    """A minimal Debian image with Python 3.11 and venv/pip, built once and kept by tag."""
    if podman.image_exists(BASE_IMAGE):
        return
    sources = next(path for path in APT_SOURCES if path.is_file())
    rootfs = workdir / "base.tar"
    subprocess.run(
        ["mmdebstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(rootfs), str(sources)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    podman.run("import", str(rootfs), BASE_IMAGE, timeout=300)
    rootfs.unlink()


def pip_config_mounts() -> list[str]:
    """Read-only mounts of the machine's pip configuration files and of the files they name (CA
    bundle, constraints), so pip in the build reaches the same index as pip here."""
    debug = subprocess.run(
        [sys.executable, "-m", "pip", "config", "debug"], capture_output=True, text=True, timeout=60
    ).stdout
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    ).stdout
    paths: set[Path] = set()
    for line in debug.splitlines():
        name, _, exists = line.strip().rpartition(", exists: ")
        if exists == "True" and name.startswith("/"):
            paths.add(Path(name))
    values = [line.split("=", 1)[1].strip("'\"") for line in listed.splitlines() if "=" in line]
    values += [os.environ[key] for key in ("PIP_CERT", "PIP_CONSTRAINT", "SSL_CERT_FILE") if key in os.environ]
    for value in values:
        for word in value.split():
            if word.startswith("/") and Path(word).exists():
                paths.add(Path(word))
    mounts = []
    for path in sorted(paths):
        mounts += ["-v", f"{path}:{path}:ro"]
    return mounts


@dataclass
class BuiltImage:
    tag: str
    seconds: float
    size_bytes: int


def build_image(podman: Podman, root: Path, dockerfile: Path, tag: str) -> BuiltImage:
    """``podman build`` of one Dockerfile from the repository root, on the local base image."""
    started = time.monotonic()
    podman.run(
        "build",
        "--format",
        "docker",  # OCI images have no HEALTHCHECK
        "--network",
        "host",
        "--layers=false",  # no cached intermediate images left behind (the sources change every run anyway)
        *pip_config_mounts(),
        "--build-arg",
        f"PYTHON_IMAGE={BASE_IMAGE}",
        "--file",
        str(dockerfile),
        "--ignorefile",
        str(dockerfile.with_name(dockerfile.name + ".dockerignore")),
        "--tag",
        tag,
        str(root),
        timeout=1200,
    )
    seconds = time.monotonic() - started
    size = int(podman.inspect("image", "inspect", tag)["Size"])
    return BuiltImage(tag, seconds, size)


def http_status(url: str) -> int:
    """The HTTP status ``url`` answers with, or 0 when nothing answers (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0
