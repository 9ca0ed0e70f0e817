"""The end of the drain: requests still running when the exit timeout passes are answered
503 / UNAVAILABLE "shutting down", as decoupled streams already are, instead of being cut off by
the front doors (uvicorn answers a cancelled request 500 with a traceback, grpc CANCELLED).

Each REST request and unary gRPC call registers the task serving it; ``cut_off`` cancels those
still running, and the front door turns that cancellation into the error. Work in engine threads
cannot be stopped this way: the server abandons it and exits (``server.FerryServer.shutdown``).

gRPC also counts the unary calls accepted before the shutdown began until their answers are
written (``unanswered``): grpc closes a connection as soon as its last call is over once its own
shutdown has begun, and a close with client frames still unread makes the kernel reset the
connection, dropping the answer bytes not yet sent. So grpc's shutdown begins once those answers
are written (``grpc.stop_serving``).
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import Unavailable
from .http_requests import error_response

#: How long the front doors have, once the drain has ended, to send the errors of what was cut off.
ANSWER_GRACE_S = 1.0


class DrainCutoff:
    """The tasks of the requests in flight, and whether the drain has ended."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task] = set()
        self.error: Unavailable | None = None  # set once the drain's time is up
        self.cut = 0  # how many requests it ended
        self.closing = False  # gRPC: the shutdown has begun, calls accepted now are not counted
        self.unanswered = 0  # unary gRPC calls accepted before it whose answer grpc has not yet written
        self._answered: asyncio.Event | None = None

    def answer_written(self) -> None:
        """A unary gRPC call counted in ``unanswered`` is over (its answer written, or it failed)."""
        self.unanswered -= 1
        if not self.unanswered and self._answered is not None:
            self._answered.set()

    async def answered(self, timeout: float) -> None:
        """Until every unary gRPC call counted has its answer written, or ``timeout`` has passed."""
        if not self.unanswered:
            return
        self._answered = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._answered.wait(), timeout)

    def cut_off(self, timeout: float) -> int:
        """The exit timeout has passed: end every request still running with the error. Returns how many."""
        self.error = Unavailable(
            f"the server is shutting down: the request was still running after the exit timeout ({timeout:g}s)"
        )
        running = list(self.tasks)
        for task in running:
            task.cancel()
        self.cut = len(running)
        return self.cut

    def taken(self, task: asyncio.Task) -> Unavailable | None:
        """The error to answer with when ``task`` was cancelled by ``cut_off`` (None: another cancellation)."""
        if self.error is None:
            return None
        uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the request goes on, to send its answer
        if uncancel is not None:
            uncancel()
        return self.error


class CutoffApp:
    """REST: registers each request's task until its answer starts, and answers one cut off before
    that with a JSON 503."""

    def __init__(self, app: ASGIApp, cutoff: DrainCutoff) -> None:
        self.app = app
        self.cutoff = cutoff

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        task = asyncio.current_task()
        assert task is not None  # uvicorn runs each request in a task of its own
        tasks = self.cutoff.tasks
        tasks.add(task)
        answering = False

        async def watched_send(message: Message) -> None:
            nonlocal answering
            if not answering:  # an answer being written (a stream's, say) is left to finish, not cut
                answering = True
                tasks.discard(task)
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except asyncio.CancelledError:
            error = None if answering else self.cutoff.taken(task)
            if error is None:
                raise
            await error_response(error.message, error.http_status)(scope, receive, send)
        finally:
            tasks.discard(task)
