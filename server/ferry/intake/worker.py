"""An intake process: owns a share of the public REST and gRPC ports, answers inference requests by
handing their tensors to the model process (``handoff.py``), runs the front half of the image
endpoints (decode, validate, pre- and post-stages: ``front_half.py``), and forwards every other
request to the model process's own listeners, so clients get exactly what one process would answer.

Started by ``supervisor.py`` as ``python -m ferry.intake.worker`` with its assignment as JSON in
``FERRY_INTAKE``. It ignores SIGINT (a terminal's Ctrl-C reaches the whole process group; the model
process decides) and drains on SIGTERM; it exits when the model process goes away.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass
from pathlib import Path

import grpc
from starlette.types import ASGIApp

from ..api.admission import Admission, Ticket
from ..api.drain_cutoff import ANSWER_GRACE_S, CutoffApp, DrainCutoff
from ..api.grpc import STREAM_DOOR, stop_serving
from ..api.http_fast import InferFastPath
from ..api.limits import Limits
from ..api.received_body import ReceivedBody
from ..api.stream_limits import StreamLimits
from ..errors import DecoupledModel, FerryError
from ..front_doors import (
    QuietUvicornServer,
    connection_options,
    public_grpc_server,
    request_limits,
    rest_config,
    reuse_port_socket,
    shared_memory_registry,
    stream_limits,
    wait_started,
)
from ..frozen_objects import freeze_built_objects
from ..heap import return_large_buffers
from ..security import ServerSecurity
from ..security.identity import Identify
from ..settings import Settings
from ..types import InferenceRequest, InferenceResponse
from ..workers import Workers
from .forward_grpc import ForwardingServicer
from .forward_http import ForwardToCore
from .front_half import HandoffPath, ImageRoutes, IntakeImages
from .handoff import HandoffClient
from .model_views import ModelViews
from .region_mirror import RegionMirror
from .shared_state import SharedConnections, SharedImageWork, SharedTable

log = logging.getLogger("ferry.intake")

ENV = "FERRY_INTAKE"


@dataclass(frozen=True)
class Assignment:
    """What the model process tells an intake process: its row, and where everything is."""

    row: int
    processes: int
    core_pid: int
    directory: str
    table_fd: int
    table_rows: int
    arena_bytes: int
    settings: dict

    def to_env(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_env(cls) -> Assignment:
        return cls(**json.loads(os.environ[ENV]))

    def path(self, name: str) -> str:
        return str(Path(self.directory) / name)


class IntakePlane:
    """What the inference front doors need from a data plane, in an intake process: admission and
    limits here (admission counted in the shared table), execution in the model process."""

    def __init__(
        self,
        admission: Admission,
        limits: Limits,
        client: HandoffClient,
        identify: Identify,
        workers: Workers,
        images: IntakeImages | None = None,
        stream_limits: StreamLimits | None = None,
    ) -> None:
        self.admission = admission
        self.stream_limits = stream_limits or StreamLimits()  # this intake's clients' streams
        self.limits = limits
        self.workers = workers
        self.identify = identify  # the core uses the identity the request arrives with
        self._client = client
        self.images = images  # encoded images for an image model: decoded here
        # (name, version) the model process found decoupled for a streamed request
        self._decoupled: set[tuple[str, str]] = set()

    async def infer(self, request: InferenceRequest, door: str = "") -> InferenceResponse:
        """One response, run in the model process; a streamed request (``door`` is ``STREAM_DOOR``)
        to a model the model process finds decoupled raises ``DecoupledModel`` instead, and that
        model's next streamed requests are relayed at once (``is_decoupled``)."""
        if self.images is not None:
            response = await self.images.infer(request)
            if response is not None:
                return response
        try:
            return await self._client.infer(request, streamed=door == STREAM_DOOR)
        except DecoupledModel:
            self._decoupled.add((request.model_name, request.model_version))
            raise

    async def infer_stream(
        self, request: InferenceRequest
    ) -> AsyncGenerator[tuple[InferenceResponse | FerryError, bool], None]:
        """The ``InferencePlane`` method for decoupled requests; an intake's servicer never reaches it,
        because a stream's requests to a decoupled model are relayed to the model process
        (``ForwardingServicer``), whose responses stream from there. Answers as one final response."""
        yield await self.infer(request), True

    def receive_body(self, nbytes: int, json_bytes: int, ticket: Ticket) -> ReceivedBody:
        """A REST body's memory: its binary section in the hand-off arena (``HandoffClient``)."""
        return self._client.receive_body(nbytes, json_bytes, ticket)

    def is_decoupled(self, name: str, version: str = "") -> bool:
        """Whether the model process found (name, version) decoupled for an earlier streamed
        request (no round trip: a request to a model first found so is refused by the model
        process with ``DecoupledModel`` and relayed then; a model that is no longer decoupled is
        still served right, through the relay)."""
        return (name, version) in self._decoupled


async def run(assignment: Assignment) -> int:
    """Serve until SIGTERM (drain, exit 0) or until the model process goes away (exit 1)."""
    settings = Settings(**assignment.settings)
    security = ServerSecurity.from_settings(settings)
    table = SharedTable.attach(assignment.core_pid, assignment.table_fd, assignment.table_rows)
    client = HandoffClient(assignment.row, assignment.arena_bytes)
    await client.connect(assignment.path("hub.sock"))
    admission = Admission(settings.max_inflight_requests, settings.max_inflight_bytes, table.counts(assignment.row))
    workers = Workers(settings.image_workers, prefix="ferry-intake")  # as the model process's
    images = IntakeImages(
        admission,
        ModelViews(client),
        HandoffPath(client, workers.image, workers.image_share, SharedImageWork(table, assignment.row)),
        workers,
    )
    plane = IntakePlane(
        admission, request_limits(settings), client, security.identify, workers, images, stream_limits(settings)
    )
    if settings.allow_shared_memory:
        client.regions = RegionMirror(
            client.describe_region, shared_memory_registry(settings), plane.limits, workers.codec
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    freeze_built_objects()  # what it imported and built: out of every full collection (before any request)

    forward = ForwardToCore(assignment.path("rest.sock"))
    channel = grpc.aio.insecure_channel(
        f"unix:{assignment.path('grpc.sock')}",
        options=[
            ("grpc.max_receive_message_length", max(settings.grpc_max_message_bytes, settings.max_response_bytes)),
            ("grpc.max_send_message_length", settings.grpc_max_message_bytes),
            # read only what a relayed stream's caller takes: no window grown ahead of it, so the
            # answers it has not taken wait in the model process, counted (api/grpc.py), not here
            ("grpc.http2.bdp_probe", 0),
        ],
    )
    routes = ImageRoutes(forward, images, settings.http_max_body_bytes)
    cutoff = DrainCutoff()  # what still runs when the drain ends is answered "shutting down"
    http = _rest_listener(settings, security, plane, routes, SharedConnections(table, assignment.row), cutoff)
    server = None
    if settings.grpc_port:
        servicer = ForwardingServicer(plane, settings.max_response_bytes, channel)
        server = public_grpc_server(plane, settings, security, assignment.processes, servicer, cutoff)
        await server.start()
    if http is not None:
        await wait_started(http.server, http.task, "the intake's REST listener")  # OSError: main() logs it
    client.send_ready()
    lost = asyncio.create_task(client.lost.wait())
    await asyncio.wait({lost, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if client.lost.is_set():
        log.error("intake %d: the model process went away; exiting", assignment.row)
        code = 1
    timeout = settings.exit_timeout_secs
    cutting = loop.call_later(timeout, cutoff.cut_off, timeout)
    grace = 0.0 if code else timeout + ANSWER_GRACE_S
    stops: list[Awaitable[object]] = []
    if server is not None:
        stops.append(stop_serving(server, cutoff, grace))
    if http is not None:
        http.server.config.timeout_graceful_shutdown = grace  # type: ignore[assignment]
        http.server.should_exit = True
        stops.append(http.task)
    await asyncio.gather(*stops, return_exceptions=True)
    cutting.cancel()
    await forward.aclose()
    await channel.close()
    client.close()
    workers.shutdown()
    return code


@dataclass
class _Listener:
    server: QuietUvicornServer
    task: asyncio.Task


def _rest_listener(
    settings: Settings,
    security: ServerSecurity,
    plane: IntakePlane,
    routes: ASGIApp,
    shared: SharedConnections,
    cutoff: DrainCutoff,
) -> _Listener | None:
    """uvicorn on this process's own SO_REUSEPORT socket: inference here, then ``routes`` (the
    image endpoints here, the rest forwarded)."""
    if not settings.http_port:
        return None
    app = security.http_app(InferFastPath(routes, plane, settings.http_max_body_bytes, settings.max_response_bytes))
    app = CutoffApp(app, cutoff)
    config = rest_config(app, settings, security, **connection_options(settings, shared))
    sock = reuse_port_socket(settings.host, settings.http_port, listen=True)
    server = QuietUvicornServer(config)
    return _Listener(server, asyncio.create_task(server.serve(sockets=[sock]), name="http"))


def main() -> None:
    assignment = Assignment.from_env()
    settings = assignment.settings
    logging.basicConfig(
        level=str(settings.get("log_level", "info")).upper(),
        format=f"%(asctime)s %(levelname)s %(name)s[intake {assignment.row}]: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per forwarded request
    return_large_buffers()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is optional on some platforms
        pass
    try:
        code = asyncio.run(run(assignment))
    except OSError as exc:
        log.error("intake %d cannot start: %s", assignment.row, exc)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
