"""The model process's side of multi-process intake: holds the public ports, serves the hand-off hub
and its own listeners on private unix sockets, starts the intake processes, restarts one that dies
and drains them all on shutdown.

Why a private listener and not a second implementation of every endpoint: whatever an intake does
not answer itself (everything but inference) is forwarded byte for byte to the model process's own
REST app and gRPC service, so health, metadata, repository control, statistics, the dashboard and
shared-memory registration behave exactly as with one process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterable

import grpc
import uvicorn
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp

from ..api.dataplane import DataPlane
from ..api.grpc import create_grpc_server
from ..child_processes import python_module_command
from ..cores import usable_cores
from ..front_doors import QuietUvicornServer, reuse_port_socket, wait_started
from ..security import ServerSecurity
from ..settings import Settings
from .handoff import HandoffHub, HubConnection
from .model_directory import ModelDirectory
from .shared_state import IMAGES_DECODED, SharedTable
from .worker import ENV, Assignment

log = logging.getLogger("ferry.intake")

RESTART_DELAY_S = 1.0


def intake_process_count(settings: Settings) -> int:
    """The option, or what fits the machine: one intake process per four usable cores (CPU quota
    included), up to eight.

    Below four cores the processes would compete with the model's own threads (and, on a small
    machine, with the load generator), so one process, as before, serves best there."""
    if settings.intake_processes:
        return settings.intake_processes
    return max(1, min(8, usable_cores() // 4))


class IntakeProcesses:
    """Everything the model process runs to serve through ``count`` intake processes."""

    def __init__(self, settings: Settings, count: int, security: ServerSecurity) -> None:
        self.settings = settings
        self.count = count
        self.security = security
        self.table = SharedTable.create(count + 1)  # row 0: the model process's own listeners
        self.hub: HandoffHub | None = None
        self._directory = ""
        self._reserved: list[socket.socket] = []
        self._processes: dict[int, asyncio.subprocess.Process] = {}
        self._watchers: dict[int, asyncio.Task] = {}
        self._private_http: QuietUvicornServer | None = None
        self._private_http_task: asyncio.Task | None = None
        self._private_grpc: grpc.aio.Server | None = None
        self._serving = False  # every intake process was ready once (from then on, one that dies is restarted)
        self._stopping = False

    async def start(self, app: ASGIApp, plane: DataPlane) -> None:
        """Hold the ports, open the private listeners and the hub, and start the intake processes;
        ``wait_ready`` waits for them. In between the model process loads its models, so the
        intakes' start (an interpreter importing the front doors each) and the loads overlap."""
        s = self.settings
        for port in (s.http_port, s.grpc_port):
            if port:
                try:
                    self._reserved.append(reuse_port_socket(s.host, port, listen=False))
                except OSError as exc:
                    raise OSError(f"cannot bind {s.host}:{port}: {exc.strerror or exc}") from None
        self._directory = _private_directory()
        self.hub = HandoffHub(
            plane.infer,
            s.intake_arena_bytes,
            ModelDirectory(plane),
            plane.admission,
            infer_soon=plane.infer_soon,
            shared_memory=plane.shared_memory,
            plans=plane,
        )
        self.hub.on_connection_lost = self._on_connection_lost
        await self.hub.start(self._path("hub.sock"))
        for row in range(1, self.count + 1):  # before any gRPC server runs: forking then makes gRPC log warnings
            await self._spawn(row)
        config = uvicorn.Config(
            app,
            uds=self._path("rest.sock"),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=max(60, int(s.http_keep_alive_timeout_secs)),
            timeout_graceful_shutdown=max(1, int(s.exit_timeout_secs)),
        )
        self._private_http = QuietUvicornServer(config)
        self._private_http_task = asyncio.create_task(self._private_http.serve(), name="private-http")
        self._private_grpc = create_grpc_server(
            plane,
            f"unix:{self._path('grpc.sock')}",
            s.grpc_max_message_bytes,
            self.security.grpc_interceptors(),
            max_response_bytes=s.max_response_bytes,
        )
        await self._private_grpc.start()
        await wait_started(self._private_http, self._private_http_task, "the model process's private REST listener")

    def _path(self, name: str) -> str:
        return os.path.join(self._directory, name)

    async def _spawn(self, row: int) -> None:
        assignment = Assignment(
            row=row,
            processes=self.count,
            core_pid=os.getpid(),
            directory=self._directory,
            table_fd=self.table.segment.fd,
            table_rows=self.table.rows,
            arena_bytes=self.settings.intake_arena_bytes,
            settings=self.settings.model_dump(mode="json", exclude={"auth_tokens"}),
        )
        self._processes[row] = await asyncio.create_subprocess_exec(
            *python_module_command("ferry.intake.worker"), env={**os.environ, ENV: assignment.to_env()}
        )
        self._watchers[row] = asyncio.create_task(self._watch(row), name=f"intake-{row}")

    async def wait_ready(self) -> None:
        """Until every intake process serves its ports; OSError if one exited first."""
        assert self.hub is not None
        ready = asyncio.create_task(self.hub.wait_ready(set(self._processes)))
        exits = {asyncio.create_task(p.wait()) for p in self._processes.values()}
        done, _ = await asyncio.wait({ready, *exits}, return_when=asyncio.FIRST_COMPLETED)
        for task in exits:
            task.cancel()
        if ready not in done:
            ready.cancel()
            codes = {row: p.returncode for row, p in self._processes.items() if p.returncode is not None}
            raise OSError(f"intake processes exited at start-up (row: exit code) {codes}; see their log lines above")
        self._serving = True

    async def _watch(self, row: int) -> None:
        """Restart an intake process that dies while the server runs (its clients' connections died with it)."""
        process = self._processes[row]
        code = await process.wait()
        self.table.clear_row(row)
        if self._stopping or not self._serving:  # at start-up: wait_ready reports the exit
            return
        log.warning("intake process %d (pid %d) exited with %s; starting a new one", row, process.pid, code)
        await asyncio.sleep(RESTART_DELAY_S)
        if not self._stopping:
            await self._spawn(row)

    def _on_connection_lost(self, connection: HubConnection) -> None:
        if connection.row > 0:
            self.table.clear_row(connection.row)

    async def stop(self, timeout: float) -> None:
        """Drain: each intake stops accepting, finishes what it holds (served by the hub meanwhile), exits."""
        self._stopping = True
        for process in self._processes.values():
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        waits = [p.wait() for p in self._processes.values()]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout + 5)
        except TimeoutError:
            for process in self._processes.values():
                if process.returncode is None:
                    log.warning("intake process pid %d did not drain in time; killing it", process.pid)
                    process.kill()
            await asyncio.gather(*(p.wait() for p in self._processes.values()))
        for watcher in self._watchers.values():
            watcher.cancel()
        if self.hub is not None:
            await self.hub.close()
        if self._private_grpc is not None:
            await self._private_grpc.stop(grace=1)
        if self._private_http is not None:
            self._private_http.should_exit = True
        if self._private_http_task is not None:
            await asyncio.gather(self._private_http_task, return_exceptions=True)
        for sock in self._reserved:
            sock.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    def ready_count(self) -> int:
        return sum(1 for c in self.hub.connections if c.ready) if self.hub is not None else 0


def _private_directory() -> str:
    """A 0700 directory for the private sockets: the temp dir, or /dev/shm when a read-only root
    filesystem leaves no writable /tmp (Docker's --read-only without a tmpfs)."""
    for parent in (None, "/dev/shm"):
        try:
            return tempfile.mkdtemp(prefix="ferry-intake-", dir=parent)
        except OSError:
            continue
    raise OSError("intake processes need a writable directory for their sockets: set TMPDIR or mount /tmp")


class IntakeCollector(Collector):
    """``ferry_intake_processes`` (ready), and per intake process ``ferry_intake_handoffs`` (requests
    and executions handed over) and ``ferry_intake_images_decoded`` (images its pool decoded)."""

    def __init__(self, intakes: IntakeProcesses) -> None:
        self._intakes = intakes

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "ferry_intake_processes", "Intake processes serving the public ports", value=self._intakes.ready_count()
        )
        handoffs = CounterMetricFamily(
            "ferry_intake_handoffs", "Inference requests an intake process handed to the model process", labels=["row"]
        )
        hub = self._intakes.hub
        for connection in sorted(hub.connections if hub is not None else (), key=lambda c: c.row):
            handoffs.add_metric([str(connection.row)], connection.handed_off)
        yield handoffs
        decoded = CounterMetricFamily(
            "ferry_intake_images_decoded", "Images an intake process decoded and pre-processed", labels=["row"]
        )
        table = self._intakes.table
        for row in range(1, self._intakes.count + 1):
            decoded.add_metric([str(row)], table.value(row, IMAGES_DECODED))
        yield decoded
