"""The child process of an isolated Python model: ``python -m ferry.backends.python_backend.child FD``.

It talks to its parent over the connection on file descriptor FD: it loads the model when told,
answers ``execute`` messages, and forwards the model's calls to other models to the parent (the
server), which runs them and sends the response back. When the parent goes away, it exits.
"""

from __future__ import annotations

import logging
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from . import triton_python_backend_utils as pb_utils
from .custom_metrics import STORE
from .runner import Failure, ModelLoadFailure, ModelRunner


def _parent_caller(conn: Connection) -> pb_utils.Caller:
    lock = threading.Lock()  # async_exec may call from several threads; one exchange at a time

    def call(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        with lock:
            conn.send(("call", request))
            reply = conn.recv()
        return reply[1]

    return call


def serve(conn: Connection) -> int:
    kind, model_file, config, args = conn.recv()
    assert kind == "load"
    pb_utils._install_caller(_parent_caller(conn))
    STORE.refusal = (
        "custom metrics (pb_utils.MetricFamily) are not available to an isolated python model "
        "(FERRY_ISOLATION=process): its values would never reach the server's /metrics"
    )
    try:
        runner = ModelRunner(model_file, config, args)
    except ModelLoadFailure as exc:
        conn.send(("failed", str(exc)))
        return 1
    conn.send(("ready", runner.config))
    while True:
        try:
            message: tuple[Any, ...] = conn.recv()
        except EOFError:  # the server is gone
            return 0
        if message[0] == "execute":
            results = runner.execute(message[1], message[2], message[3])
            try:
                conn.send(("result", results))
            except Exception as exc:  # pickling failed before anything was written: say why
                failure = Failure(f"python model '{runner.name}' returned outputs that cannot be sent: {exc}")
                conn.send(("result", [failure] * len(results)))
        elif message[0] == "close":
            runner.finalize()
            conn.send(("closed",))
            return 0


if __name__ == "__main__":
    logging.basicConfig(  # into the server's log (stderr is inherited), marked as the child's
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s [python child %(process)d]: %(message)s"
    )
    sys.exit(serve(Connection(int(sys.argv[1]))))
