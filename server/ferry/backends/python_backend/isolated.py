"""A Python-model instance in a child process of its own (``FERRY_ISOLATION: "process"``).

User code cannot take the server down: if the child dies while executing, the requests of that
batch fail with a message naming the exit status and a fresh child is started (``initialize`` runs
again); a child that dies while idle is replaced before the next batch. Tensors cross the process
boundary pickled over a socket pair, which costs a copy each way.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from ...child_processes import python_module_command
from ...errors import ModelLoadError
from ..base import InstanceSpec, ModelIO
from .host import call_model
from .instance import PythonInstance
from .runner import Failure, Outputs

log = logging.getLogger(__name__)


class ChildDied(Exception):
    pass


class _Child:
    """One running child: its process and the connection to it."""

    def __init__(self, model_file: Path, config: dict[str, Any], args: dict[str, str]) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                python_module_command("ferry.backends.python_backend.child", str(theirs.fileno())),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        try:
            self.send(("load", model_file, config, args))
            reply = self.answer()
        except ChildDied as died:
            raise ModelLoadError(f"the python model's child process died while loading ({died})") from None
        if reply[0] != "ready":
            self.stop()
            raise ModelLoadError(reply[1])
        self.config: dict[str, Any] = reply[1]

    def send(self, message: tuple[Any, ...]) -> None:
        try:
            self.conn.send(message)
        except OSError:
            raise ChildDied(self.exit_status()) from None

    def answer(self) -> tuple[Any, ...]:
        """The child's next reply; its calls to other models (from initialize or execute) are
        served here in the meantime, and their responses sent back."""
        while True:
            try:
                reply = self.conn.recv()
            except (EOFError, OSError):
                raise ChildDied(self.exit_status()) from None
            if reply[0] != "call":
                return reply
            self.send(("called", call_model(reply[1])))

    def exit_status(self) -> str:
        try:
            code = self.process.wait(10)
        except subprocess.TimeoutExpired:  # the connection broke but the child lives on: end it
            self.process.kill()
            code = self.process.wait()
        if code < 0:
            return f"signal {signal.Signals(-code).name}"
        return f"exit code {code}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10) -> None:
        try:
            if self.alive():
                self.conn.send(("close",))
                self.process.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            self.conn.close()


class IsolatedInstance(PythonInstance):
    def __init__(self, model_file: Path, config: dict[str, Any], args: dict[str, str], spec: InstanceSpec) -> None:
        self._start = (model_file, config, args)
        self._lock = threading.Lock()
        self._broken = ""
        self._child = _Child(*self._start)
        self.config = self._child.config
        self.name = args["model_name"]
        super().__init__(spec, ModelIO([], []), f"cpu (python child pid {self._child.process.pid})")

    @property
    def pid(self) -> int:
        return self._child.process.pid

    def execute(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[Outputs | Failure]:
        with self._lock:
            if not self._child.alive():
                self._restart(
                    f"python model '{self.name}' instance {self.spec.name}: its child process "
                    f"(pid {self._child.process.pid}) died while idle ({self._child.exit_status()})"
                )
            if self._broken:
                return [Failure(self._broken, "UNAVAILABLE")] * len(inputs)
            try:
                return self._exchange(inputs, outputs, parameters)
            except ChildDied as died:
                message = (
                    f"python model '{self.name}' instance {self.spec.name}: its child process "
                    f"(pid {self._child.process.pid}) died with {died} while executing this batch"
                )
                self._restart(message)
                return [Failure(message)] * len(inputs)

    def _exchange(
        self, inputs: list[dict[str, np.ndarray]], outputs: list[list[str]], parameters: list[dict[str, Any]] | None
    ) -> list[Outputs | Failure]:
        self._child.send(("execute", inputs, outputs, parameters))
        return self._child.answer()[1]

    def _restart(self, why: str) -> None:
        log.error("%s; starting a new child", why)
        self._child.stop()
        try:
            self._child = _Child(*self._start)
        except Exception as exc:
            self._broken = (
                f"python model '{self.name}' instance {self.spec.name} is unavailable: "
                f"its child process could not be restarted ({exc})"
            )
            log.error(self._broken)
        else:
            self.device = f"cpu (python child pid {self._child.process.pid})"

    def close(self) -> None:
        with self._lock:
            self._child.stop()
