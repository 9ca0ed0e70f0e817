"""The real server the candidates run in: ``ferry serve`` on loopback over a private copy of the model.

A candidate with another image pre-processing pool size (a server setting, not a model config)
runs in a server of its own, started when first needed and kept, so rounds still interleave.
The copy (hard links where the file system allows, so large models cost no space) keeps the
user's repository untouched and gives precision variants somewhere to be built. Each candidate
is loaded through the repository API with its config as the load's ``config`` parameter, which
replaces the serving version only once the new one is ready.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from google.protobuf import json_format

from ferry_client.http import HttpClient
from ferry_client.protocol import model_config_pb2 as mc

from ..cli_errors import PORT_TAKEN_LINES
from ..ocr.settings import ocr_settings
from ..repository.config import read_config_file
from .candidates import Candidate

START_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 2.0


class TuningError(RuntimeError):
    """The tuner cannot go on (the server would not start, a candidate would not load)."""


class PortTaken(TuningError):
    """The server exited at its start because a port was taken between the check that it was free
    and the server's bind (by any program's outgoing connection: free ports come from the same
    range); the start is tried again on other ports."""


#: Starts of the tuning server tried before a port taken at its bind ends the run.
START_ATTEMPTS = 3


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def composing_models(model_dir: Path) -> list[str]:
    """The models that ``model_dir``'s model runs (an OCR model's three, an ensemble's steps), and
    theirs in turn, which the private repository needs beside it: found next to it in its repository."""
    found: list[str] = []
    pending = [model_dir]
    while pending:
        config = read_config_file(pending.pop())
        if config is None:
            continue
        if config.platform == "ferry_ocr":
            settings = ocr_settings(config, config.name)
            names = [settings.detector, settings.angle_classifier, settings.recognizer]
        else:
            names = [step.model_name for step in config.ensemble_scheduling.step]
        for name in names:
            if name not in found and name != model_dir.name:
                if not (model_dir.parent / name).is_dir():
                    raise TuningError(f"model '{config.name}' runs '{name}', which is not in {model_dir.parent}")
                found.append(name)
                pending.append(model_dir.parent / name)
    return found


class PrivateRepository:
    """A temporary repository holding a copy of the model (and the variants built from it)."""

    def __init__(self, model_dir: Path) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ferry-tune-"))
        self.name = model_dir.name
        try:
            for name in [self.name, *composing_models(model_dir)]:
                source = model_dir if name == self.name else model_dir.parent / name
                shutil.copytree(source, self.root / name, copy_function=_link_or_copy, symlinks=False)
        except BaseException:
            self.remove()
            raise

    @property
    def model_dir(self) -> Path:
        return self.root / self.name

    def config(self, name: str) -> mc.ModelConfig:
        config = read_config_file(self.root / name) or mc.ModelConfig()
        config.name = config.name or name
        return config

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class TuningServer:
    """``ferry serve`` in explicit mode on free loopback ports; stopped by its pid on exit."""

    def __init__(self, repository: PrivateRepository, extra_args: tuple[str, ...] = (), image_workers: int = 0) -> None:
        self.repository = repository
        self.log_path = repository.root / f"server-{image_workers}.log"
        self._loaded: dict[str, Candidate] = {}
        self._configs: dict[str, mc.ModelConfig] = {}
        for _ in range(START_ATTEMPTS - 1):
            self._start(extra_args, image_workers)
            try:
                self._wait_ready()
                return
            except PortTaken:
                self.client.close()
        self._start(extra_args, image_workers)
        self._wait_ready()

    def _start(self, extra_args: tuple[str, ...], image_workers: int) -> None:
        self.http_port = _free_port()
        command = [
            sys.executable,
            "-m",
            "ferry",
            "serve",
            str(self.repository.root),
            "--host",
            "127.0.0.1",
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(_free_port()),
            "--metrics-port",
            "0",
            "--model-control-mode",
            "explicit",
            "--no-dashboard",
            *extra_args,
        ]
        env = {**os.environ, "FERRY_IMAGE_WORKERS": str(image_workers)} if image_workers else None
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.url = f"127.0.0.1:{self.http_port}"
        self.client = HttpClient(self.url, timeout=300.0)

    def _wait_ready(self) -> None:
        """Until the server is ready; probed with a short timeout, so a program that took the port
        and never answers cannot hold the start for the requests' timeout."""
        deadline = time.monotonic() + START_TIMEOUT_S
        with HttpClient(self.url, timeout=PROBE_TIMEOUT_S) as probe:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    log = self.log_tail()
                    failure = PortTaken if any(taken in log for taken in PORT_TAKEN_LINES) else TuningError
                    raise failure(f"the server exited with {self.process.returncode}:\n{log}")
                with contextlib.suppress(Exception):
                    if probe.is_server_ready():
                        return
                time.sleep(0.1)
        self.stop()
        raise TuningError(f"the server was not ready within {START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def config(self, name: str) -> mc.ModelConfig:
        if name not in self._configs:
            self._configs[name] = self.repository.config(name)
        return self._configs[name]

    def use(self, candidate: Candidate) -> None:
        """Make ``candidate`` the serving config of its model (no reload when it already is)."""
        if self._loaded.get(candidate.model) == candidate:
            return
        config = candidate.apply(self.config(candidate.model))
        try:
            self.client.load_model(candidate.model, json_format.MessageToJson(config))
        except Exception as exc:
            raise TuningError(f"{candidate.label()} did not load: {exc}") from None
        self._loaded[candidate.model] = candidate

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> TuningServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
