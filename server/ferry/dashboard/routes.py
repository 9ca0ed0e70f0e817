"""Mounts the dashboard on the REST app: the page at ``/``, its assets, and two small JSON endpoints.

The assets ship inside the package (``ferry/dashboard/static``) and the page's Content Security
Policy only allows this origin, so the dashboard never fetches anything from the internet.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from prometheus_client.registry import Collector
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from ..api.dataplane import DataPlane
from ..api.http_requests import json_response
from .models import models_overview
from .snapshot import metrics_snapshot

STATIC_PACKAGE = ("ferry.dashboard", "static")
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' blob: data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'none'"
)
_NO_STORE = {"Cache-Control": "no-store"}


def index_html() -> bytes:
    """The page itself, read from the installed package."""
    # One name per joinpath call: Python 3.10 takes no more.
    return files(STATIC_PACKAGE[0]).joinpath(STATIC_PACKAGE[1]).joinpath("index.html").read_bytes()


def mount_dashboard(app: FastAPI, plane: DataPlane, registry: Collector) -> None:
    """Serve the dashboard at ``/`` reading models from ``plane`` and numbers from ``registry``."""
    page = index_html()

    @app.get("/", include_in_schema=False)
    async def dashboard_page() -> Response:
        return Response(
            page,
            media_type="text/html; charset=utf-8",
            headers={
                "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                "Cache-Control": "no-cache",
                "X-Content-Type-Options": "nosniff",
            },
        )

    @app.get("/dashboard/api/models")
    async def dashboard_models() -> Response:
        """Every model with its versions' states, platform, instances, devices and batching settings."""
        response = json_response(models_overview(plane))
        response.headers.update(_NO_STORE)
        return response

    @app.get("/dashboard/api/metrics")
    async def dashboard_metrics() -> Response:
        """Cumulative per-model counters and histogram buckets, host CPU/memory and GPU gauges."""
        response = json_response(metrics_snapshot(registry))
        response.headers.update(_NO_STORE)
        return response

    app.mount("/dashboard/static", StaticFiles(packages=[STATIC_PACKAGE]), name="dashboard-static")
