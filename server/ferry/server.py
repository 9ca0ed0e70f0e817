"""Runs the front doors and the model manager on one event loop, and shuts them down in order.
With several intake processes (``intake/``) this process keeps the models and hands the public
ports to them; its own front doors then listen on private sockets only.

Shutdown order matters: readiness flips first (load balancers stop sending), the front doors stop
accepting, in-flight and queued requests finish within the exit timeout, then models unload.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import uvicorn

from .api.admission import Admission, AdmissionCollector
from .api.connection_limits import ConnectionCollector
from .api.dataplane import DataPlane
from .api.drain_cutoff import ANSWER_GRACE_S, CutoffApp, DrainCutoff
from .api.grpc import stop_serving
from .api.http import create_http_app
from .api.http_fast import InferFastPath
from .api.logging_ext import LoggingControl
from .api.stream_limits import StreamsCollector
from .api.trace_ext import RequestTracing, file_exporter, otlp_exporter
from .backends.python_backend import host as python_models
from .backends.python_backend.custom_metrics import metrics_app
from .caching import ResponseCache
from .caching.metrics import CacheCollector
from .dashboard import mount_dashboard
from .environment_check import warn_unknown_variables
from .errors import FerryError
from .front_doors import (
    QuietUvicornServer,
    connection_options,
    public_grpc_server,
    request_limits,
    rest_config,
    shared_memory_registry,
    stream_limits,
    wait_started,
)
from .frozen_objects import freeze_built_objects
from .heap import return_large_buffers
from .intake.shared_state import OPEN_CONNECTIONS, ServerImageWork
from .intake.supervisor import IntakeCollector, IntakeProcesses, intake_process_count
from .metrics import Metrics
from .pipelines.slices import ImageWorkCollector
from .repository.manager import ModelManager
from .repository.model import ModelVersion
from .security import SecurityConfigError, ServerSecurity
from .settings import Settings
from .startup_report import model_table, ready_line
from .workers import Workers

if TYPE_CHECKING:
    import grpc
    from starlette.types import ASGIApp

log = logging.getLogger("ferry")


class FerryServer:
    """The whole server: model manager, data plane, REST and gRPC front doors."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.security = ServerSecurity.from_settings(settings)
        self.manager = ModelManager(
            settings.model_repository,
            control_mode=settings.model_control_mode,
            startup_models=settings.load_model,
            poll_interval=settings.repository_poll_secs,
            workers=Workers(settings.image_workers),
        )
        self.metrics = Metrics(self.manager.ready_models)
        exporters = [file_exporter(settings.trace_file)] if settings.trace_file else []
        if settings.trace_otlp_endpoint:
            exporters.append(otlp_exporter(settings.trace_otlp_endpoint))
        self.cache = ResponseCache(settings.cache_size) if settings.cache_size else None
        if self.cache is not None:
            self.metrics.registry.register(CacheCollector(self.cache, self.manager.ready_models))
        self.manager.on_loaded = self._on_loaded
        count = intake_process_count(settings)
        self.intakes = IntakeProcesses(settings, count, self.security) if count > 1 else None
        self.plane = DataPlane(
            self.manager,
            Admission(
                settings.max_inflight_requests,
                settings.max_inflight_bytes,
                self.intakes.table.counts(0) if self.intakes is not None else None,
                settings.max_engine_memory_bytes,
            ),
            request_limits(settings),
            self.cache,
            tracing=RequestTracing(exporters, trace_file=str(settings.trace_file or "")),
            logging_control=LoggingControl.from_level(settings.log_level, settings.log_format),
            shared_memory=shared_memory_registry(settings),
            identify=self.security.identify,
            strict_readiness=settings.strict_readiness,
            stream_limits=stream_limits(settings),
            max_streamed_requests=settings.max_streamed_requests,
            streamed_responses_per_turn=settings.streamed_responses_per_turn,
        )
        self.metrics.registry.register(AdmissionCollector(self.plane.admission))
        self.metrics.registry.register(
            StreamsCollector(self.plane.stream_limits, lambda: len(self.plane.open_streams), self.plane.response_pacer)
        )
        work = self.plane.image_work
        self.metrics.registry.register(
            ImageWorkCollector(work if self.intakes is None else ServerImageWork(work, self.intakes.table))
        )
        if self.intakes is not None:
            self.metrics.registry.register(IntakeCollector(self.intakes))
        self._stop = asyncio.Event()
        self._http: QuietUvicornServer | None = None
        self._http_task: asyncio.Task | None = None
        self._metrics_http: QuietUvicornServer | None = None
        self._metrics_task: asyncio.Task | None = None
        self._grpc: grpc.aio.Server | None = None
        self.cutoff = DrainCutoff()  # requests still running when the drain ends

    def _on_loaded(self, model: ModelVersion) -> None:
        self.metrics.attach(model)
        if model.config.response_cache.enable and self.cache is None:
            log.warning(
                "model '%s' enables response_cache but the server has no cache (--cache-size 0): "
                "its responses are not cached",
                model.name,
            )

    def request_stop(self) -> None:
        self._stop.set()

    async def start(self) -> None:
        freeze_built_objects()  # what it imported and built: out of every full collection (before any door opens)
        s = self.settings
        app: ASGIApp | None = None
        if s.http_port or self.intakes is not None:
            app = create_http_app(self.plane, s.http_max_body_bytes, s.max_response_bytes)
            if s.dashboard:
                mount_dashboard(app, self.plane, self.metrics.registry)
            app = self.security.http_app(InferFastPath(app, self.plane, s.http_max_body_bytes, s.max_response_bytes))
            app = CutoffApp(app, self.cutoff)
            if self.intakes is None:  # otherwise the intake processes reach it on a private socket
                config = rest_config(app, s, self.security, host=s.host, port=s.http_port, **connection_options(s))
                self._http = QuietUvicornServer(config)
                self._http_task = asyncio.create_task(self._http.serve(), name="http")
        if s.metrics_port:
            config = uvicorn.Config(
                self.security.metrics_app(metrics_app(self.metrics.registry)),  # + pb_utils.MetricFamily
                host=s.host,
                port=s.metrics_port,
                log_level="warning",
                access_log=False,
                lifespan="off",
                **connection_options(s),
            )
            self._metrics_http = QuietUvicornServer(config)
            listeners = {"metrics": _open_connections(self._metrics_http)}
            if self._http is not None:
                listeners["rest"] = _open_connections(self._http)
            elif self.intakes is not None and s.http_port:
                table = self.intakes.table
                listeners["rest"] = lambda: table.column_total(OPEN_CONNECTIONS)
            self.metrics.registry.register(ConnectionCollector(listeners))
            self._metrics_task = asyncio.create_task(self._metrics_http.serve(), name="metrics")
        if self.intakes is not None:
            assert app is not None  # built above whenever there are intake processes
            await self.intakes.start(app, self.plane)
        elif s.grpc_port:
            self._grpc = public_grpc_server(self.plane, s, self.security, cutoff=self.cutoff)
            await self._grpc.start()
        python_models.configure(
            s.allow_python_models, self.plane.infer, asyncio.get_running_loop(), self.plane.infer_stream
        )
        loading = asyncio.create_task(self.manager.start(), name="load-models")
        if self.intakes is not None:
            try:  # started above, they come up while the models load; one that exits fails the start at once
                await self.intakes.wait_ready()
            except BaseException:
                loading.cancel()
                raise
        await loading
        if self._http is not None and self._http_task is not None:
            await wait_started(self._http, self._http_task, f"REST server on {s.host}:{s.http_port}")
        self.plane.started = True
        log.info("models in %s:\n%s", self.manager.repository, model_table(self.manager.index()))
        intake = f"{self.intakes.count} intake processes" if self.intakes is not None else "one process"
        unready = self.manager.unready_named_models()
        if not s.strict_readiness and self.manager.ready_models():
            unready = []  # ready, though not every model is (the table above says which)
        log.info(
            "%s; repository %s (%s mode), %s, %s",
            ready_line(s.host, s.http_port, s.grpc_port, s.metrics_port, unready),
            self.manager.repository,
            s.model_control_mode.value,
            self.security.describe(),
            intake,
        )

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        starting = asyncio.create_task(self.start(), name="start")
        stopping = asyncio.create_task(self._stop.wait(), name="wait-for-stop")
        await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
        abandoned = not starting.done()
        if abandoned:  # SIGTERM while models still load: stop loading, shut down anyway
            log.info("stop requested during start-up; model loads still running are abandoned")
            starting.cancel()
        try:
            await starting
        except asyncio.CancelledError:
            pass
        except BaseException:
            stopping.cancel()
            raise
        await stopping
        left_work = await self.shutdown()
        if abandoned or left_work:
            # A model thread (a load's initialize(), an execute() or a page's OCR) cannot be
            # interrupted, and the interpreter would wait for it at exit, perhaps for ever:
            # everything is closed and answered, so leave without it.
            logging.shutdown()
            os._exit(0)

    async def shutdown(self) -> bool:
        """Drain for up to the exit timeout, then answer what still runs 503 / UNAVAILABLE and stop.
        Returns whether work was left running (the caller exits without waiting for it)."""
        timeout = self.settings.exit_timeout_secs
        log.info("shutting down: draining for up to %.0fs", timeout)
        self.plane.draining = True
        self.manager.hurry()  # queued requests run now instead of waiting for batch-mates that won't come
        loop = asyncio.get_running_loop()
        drain_ends = loop.time() + timeout
        cutting = loop.call_at(drain_ends, self._cut_off, timeout)
        ended = await self.plane.end_streams(timeout)  # decoupled requests: their final response, or an error
        if ended:
            log.warning("ended %d decoupled request(s) still open after %.0fs with an error", ended, timeout)
        # the front doors wait for what they serve until the drain ends, then deliver the errors
        grace = max(0.0, drain_ends - loop.time()) + ANSWER_GRACE_S
        stops: list[Awaitable[object]] = []
        if self.intakes is not None:
            stops.append(self.intakes.stop(grace))
        if self._grpc is not None:
            stops.append(stop_serving(self._grpc, self.cutoff, grace))
        if self._http is not None:
            self._http.config.timeout_graceful_shutdown = grace  # type: ignore[assignment]
            self._http.should_exit = True
            if self._http_task is not None:
                stops.append(self._http_task)
        await asyncio.gather(*stops, return_exceptions=True)
        cutting.cancel()
        left = max(0.0, drain_ends - loop.time())
        try:  # models finish what they accepted, unless the drain's time is up (then what runs is left)
            await asyncio.wait_for(self.manager.stop(left), left + ANSWER_GRACE_S)
            left_work = self.cutoff.cut > 0
        except asyncio.TimeoutError:
            left_work = True
        if left_work:
            log.warning("work still running in model threads after the exit timeout is abandoned")
        if self._metrics_http is not None:
            self._metrics_http.should_exit = True
        if self._metrics_task is not None:
            await asyncio.gather(self._metrics_task, return_exceptions=True)
        self.metrics.close()
        self.plane.tracing.shutdown()  # flushes spans still batched for the exporters
        self.manager.workers.shutdown()
        log.info("ferry stopped")
        return left_work

    def _cut_off(self, timeout: float) -> None:
        cut = self.cutoff.cut_off(timeout)
        if cut:
            log.warning("answered %d request(s) still running after %.0fs: the server is shutting down", cut, timeout)


def _open_connections(server: uvicorn.Server) -> Callable[[], int]:
    return lambda: len(server.server_state.connections)


def serve(settings: Settings) -> None:
    """Run the server until SIGTERM or SIGINT."""
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    warn_unknown_variables(os.environ)
    return_large_buffers()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is optional on some platforms
        pass
    try:
        asyncio.run(FerryServer(settings).run())
    except FerryError as exc:
        log.error("cannot start: %s", exc.message)
        raise SystemExit(2) from None
    except SecurityConfigError as exc:
        log.error("cannot start: %s", exc)
        raise SystemExit(2) from None
    except OSError as exc:
        log.error("cannot start: %s", exc)
        raise SystemExit(1) from None
