"""The lean inference route answers exactly as the FastAPI route would, and only for that route."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from ferry.api.dataplane import DataPlane
from ferry.api.http import create_http_app
from ferry.api.http_fast import InferFastPath
from ferry.repository.manager import ModelManager

from ..conftest import MODEL_REPO

BODY_LIMIT = 4096
INFER_JSON = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}]}


class Recording:
    """Passes requests on to ``app`` and remembers which paths reached it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.paths.append(scope["path"])
        await self.app(scope, receive, send)


@pytest.fixture()
def apps() -> tuple[TestClient, TestClient, Recording]:
    plane = DataPlane(ModelManager(MODEL_REPO))  # not started: no model is loaded
    full = create_http_app(plane, BODY_LIMIT)
    recording = Recording(full)
    return TestClient(full), TestClient(InferFastPath(recording, plane, BODY_LIMIT, BODY_LIMIT)), recording


@pytest.mark.parametrize(
    ("path", "kwargs"),
    [
        ("/v2/models/simple/infer", {"json": INFER_JSON}),
        ("/v2/models/simple/versions/1/infer", {"json": INFER_JSON}),
        ("/v2/models/simple/infer", {"content": b"{not json"}),
        ("/v2/models/simple/infer", {"content": b"x" * (BODY_LIMIT + 1)}),
        ("/v2/models/simple/infer", {"content": b"x", "headers": {"Content-Encoding": "br-nonsense"}}),
    ],
)
def test_errors_match_the_fastapi_route(apps, path: str, kwargs: dict) -> None:
    full, fast, recording = apps
    expected = full.post(path, **kwargs)
    got = fast.post(path, **kwargs)
    assert recording.paths == []  # the fast path answered
    assert got.status_code == expected.status_code >= 400
    assert got.json() == expected.json()
    assert got.headers.get("retry-after") == expected.headers.get("retry-after")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/health/live"),
        ("GET", "/v2/models/simple/infer"),
        ("POST", "/v2/models/simple/infer/extra"),
        ("POST", "/v2/models/simple/classify"),
    ],
)
def test_every_other_request_goes_to_the_fastapi_app(apps, method: str, path: str) -> None:
    full, fast, recording = apps
    expected = full.request(method, path)
    got = fast.request(method, path)
    assert recording.paths == [path]
    assert got.status_code == expected.status_code
