"""``/docs``: Swagger UI served from the installed ``swagger-ui-py`` package, not from a CDN, so the
API documentation works on a machine without internet access (FastAPI's default page would be blank)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"


def swagger_ui_assets() -> Path:
    """The folder of Swagger UI's built files inside the ``swagger_ui`` package (found without importing
    it: only its static files are used)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is missing: pip install swagger-ui-py")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def mount_docs(app: FastAPI) -> None:
    """Serve Swagger UI at /docs with every asset from /docs/assets (the app must be made with
    ``docs_url=None``, so FastAPI's CDN page is not registered first)."""
    app.mount(ASSETS_PATH, StaticFiles(directory=swagger_ui_assets()), name="docs-assets")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API documentation",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
        )
