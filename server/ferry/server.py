"""Runs the front doors and the model manager on one event loop, and shuts them down in order.

Shutdown order matters: readiness flips first (load balancers stop sending), the front doors stop
accepting, in-flight and queued requests finish within the exit timeout, then models unload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from .api.admission import Admission, AdmissionCollector
from .api.connection_limits import ConnectionCollector, HttpConnectionLimits, guarded_protocol
from .api.dataplane import DataPlane
from .api.grpc import create_grpc_server
from .api.grpc_limits import GrpcLimits
from .api.http import create_http_app
from .api.http_fast import InferFastPath
from .api.limits import Limits
from .api.logging_ext import LoggingControl
from .api.trace_ext import RequestTracing, file_exporter, otlp_exporter
from .backends.python_backend import host as python_models
from .caching import ResponseCache
from .caching.metrics import CacheCollector
from .dashboard import mount_dashboard
from .errors import FerryError
from .metrics import Metrics
from .pipelines.slices import ImageWorkCollector
from .repository.manager import ModelManager
from .repository.model import ModelVersion
from .security import SecurityConfigError, ServerSecurity
from .settings import Settings
from .startup_report import model_table, ready_line

log = logging.getLogger("ferry")


class _UvicornServer(uvicorn.Server):
    """uvicorn without its own signal handling: the Ferry server owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


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
        )
        self.metrics = Metrics(self.manager.ready_models)
        exporters = [file_exporter(settings.trace_file)] if settings.trace_file else []
        if settings.trace_otlp_endpoint:
            exporters.append(otlp_exporter(settings.trace_otlp_endpoint))
        self.cache = ResponseCache(settings.cache_size) if settings.cache_size else None
        if self.cache is not None:
            self.metrics.registry.register(CacheCollector(self.cache, self.manager.ready_models))
        self.manager.on_loaded = self._on_loaded
        self.plane = DataPlane(
            self.manager,
            Admission(settings.max_inflight_requests, settings.max_inflight_bytes),
            Limits(
                settings.max_tensor_elements,
                settings.max_bytes_elements,
                settings.max_inputs_per_request,
                settings.http_max_json_bytes,
            ),
            self.cache,
            tracing=RequestTracing(exporters, trace_file=str(settings.trace_file or "")),
            logging_control=LoggingControl.from_level(settings.log_level, settings.log_format),
        )
        self.metrics.registry.register(AdmissionCollector(self.plane.admission))
        self.metrics.registry.register(ImageWorkCollector(self.plane.image_work))
        self._stop = asyncio.Event()
        self._http: _UvicornServer | None = None
        self._http_task: asyncio.Task | None = None
        self._metrics_http: _UvicornServer | None = None
        self._metrics_task: asyncio.Task | None = None
        self._grpc = None

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
        s = self.settings
        if s.http_port:
            app = create_http_app(self.plane, s.http_max_body_bytes, s.max_response_bytes)
            if s.dashboard:
                mount_dashboard(app, self.plane, self.metrics.registry)
            app = self.security.http_app(InferFastPath(app, self.plane, s.http_max_body_bytes, s.max_response_bytes))
            config = uvicorn.Config(
                app,
                host=s.host,
                port=s.http_port,
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=max(1, int(s.exit_timeout_secs)),
                **self._connection_options(),
                **self.security.uvicorn_options(),
            )
            self._http = _UvicornServer(config)
            self._http_task = asyncio.create_task(self._http.serve(), name="http")
        if s.metrics_port:
            from prometheus_client import make_asgi_app

            config = uvicorn.Config(
                self.security.metrics_app(make_asgi_app(self.metrics.registry)),
                host=s.host,
                port=s.metrics_port,
                log_level="warning",
                access_log=False,
                lifespan="off",
                **self._connection_options(),
            )
            self._metrics_http = _UvicornServer(config)
            listeners = {"metrics": self._metrics_http}
            if self._http is not None:
                listeners["rest"] = self._http
            self.metrics.registry.register(
                ConnectionCollector({name: _open_connections(server) for name, server in listeners.items()})
            )
            self._metrics_task = asyncio.create_task(self._metrics_http.serve(), name="metrics")
        if s.grpc_port:
            self._grpc = create_grpc_server(
                self.plane,
                f"{s.host}:{s.grpc_port}",
                s.grpc_max_message_bytes,
                self.security.grpc_interceptors(),
                self.security.grpc_credentials(),
                GrpcLimits(
                    s.grpc_max_concurrent_streams,
                    s.grpc_max_concurrent_rpcs,
                    s.grpc_min_ping_interval_secs,
                    s.grpc_max_ping_strikes,
                    s.grpc_max_metadata_bytes,
                    s.grpc_max_connection_idle_secs,
                ),
                s.max_response_bytes,
            )
            await self._grpc.start()
        python_models.configure(s.allow_python_models, self.plane.infer, asyncio.get_running_loop())
        await self.manager.start()
        if self._http is not None:
            while not self._http.started:
                if self._http_task and self._http_task.done():
                    raise OSError(f"REST server on {s.host}:{s.http_port} stopped at start-up")
                await asyncio.sleep(0.01)
        self.plane.started = True
        log.info("models in %s:\n%s", self.manager.repository, model_table(self.manager.index()))
        log.info(
            "%s; repository %s (%s mode), %s",
            ready_line(s.host, s.http_port, s.grpc_port, s.metrics_port),
            self.manager.repository,
            s.model_control_mode.value,
            self.security.describe(),
        )

    def _connection_options(self) -> dict[str, Any]:
        """uvicorn options of a REST-style listener: the guarded protocol and the keep-alive timeout."""
        s = self.settings
        limits = HttpConnectionLimits(
            s.http_max_connections,
            s.http_header_timeout_secs,
            s.http_max_header_bytes,
            s.http_min_body_rate,
            s.http_body_grace_secs,
        )
        return {"http": guarded_protocol(limits), "timeout_keep_alive": s.http_keep_alive_timeout_secs}

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        await self.start()
        await self._stop.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        timeout = self.settings.exit_timeout_secs
        log.info("shutting down: draining for up to %.0fs", timeout)
        self.plane.draining = True
        self.manager.hurry()  # queued requests run now instead of waiting for batch-mates that won't come
        stops = []
        if self._grpc is not None:
            stops.append(self._grpc.stop(grace=timeout))
        if self._http is not None:
            self._http.should_exit = True
            if self._http_task is not None:
                stops.append(self._http_task)
        await asyncio.gather(*stops, return_exceptions=True)
        await self.manager.stop(timeout)
        if self._metrics_http is not None:
            self._metrics_http.should_exit = True
            await asyncio.gather(self._metrics_task, return_exceptions=True)
        self.metrics.close()
        self.plane.tracing.shutdown()  # flushes spans still batched for the exporters
        log.info("ferry stopped")


def _open_connections(server: uvicorn.Server) -> Callable[[], int]:
    return lambda: len(server.server_state.connections)


def serve(settings: Settings) -> None:
    """Run the server until SIGTERM or SIGINT."""
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
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
