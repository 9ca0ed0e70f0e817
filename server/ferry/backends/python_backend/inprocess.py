"""A Python-model instance in the server's own process: the fastest path (no copies, no IPC).

User code shares the server's process, so an exception fails its requests but a crash (a segfault
in an extension, ``os._exit``) takes the server with it; isolation (see ``isolated``) avoids that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...response_streams import ResponseSink
from ..base import InstanceSpec, ModelIO
from .instance import PythonInstance
from .runner import Failure, ModelRunner, Outputs


class InProcessInstance(PythonInstance):
    def __init__(self, model_file: Path, config: dict[str, Any], args: dict[str, str], spec: InstanceSpec) -> None:
        self.runner = ModelRunner(model_file, config, args)
        self.config = self.runner.config
        super().__init__(spec, ModelIO([], []), "cpu (in-process python)")

    def execute(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[Outputs | Failure]:
        return self.runner.execute(inputs, outputs, parameters)

    def execute_decoupled(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        sinks: list[ResponseSink | None],
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[Outputs | Failure]:
        return self.runner.execute_decoupled(inputs, outputs, sinks, parameters)

    def close(self) -> None:
        self.runner.finalize()
