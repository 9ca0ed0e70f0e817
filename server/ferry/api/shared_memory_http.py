"""REST routes of the shared memory extensions (Triton's ``/v2/systemsharedmemory`` and
``/v2/cudasharedmemory`` paths): JSON in and out, every rule lives in the registry. Each call acts
for the caller's identity (its bearer token), read from the Authorization header."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response

from ..security.identity import Identify
from .shared_memory import SharedMemoryRegistry

JsonBody = Callable[[Request], Awaitable[dict[str, Any]]]
JsonResponse = Callable[[Any], Response]


def add_shared_memory_routes(
    app: FastAPI, registry: SharedMemoryRegistry, identify: Identify, json_body: JsonBody, json_response: JsonResponse
) -> None:
    """Register, unregister and status for system and CUDA shared memory (CUDA regions registered
    where torch sees a GPU; elsewhere as a Triton built without GPUs answers: ``cuda_shared_memory``).
    With shared memory off, both answer as Triton with client shared memory off: status ``[]``, the
    rest 501."""

    def owner(request: Request) -> str:
        return identify(request.headers.get("authorization"))

    @app.get("/v2/systemsharedmemory/status")
    @app.get("/v2/systemsharedmemory/region/{name}/status")
    async def system_status(request: Request, name: str = "") -> Response:
        return json_response(registry.status(owner(request), name))

    @app.post("/v2/systemsharedmemory/region/{name}/register")
    async def system_register(name: str, request: Request) -> Response:
        registry.check_enabled()  # a disabled extension says so before the body is read
        body = await json_body(request)
        key = body.get("key")
        if not isinstance(key, str):
            key = ""  # the registry names the bad key
        registry.register(owner(request), name, key, body.get("offset", 0), body.get("byte_size", 0))
        return Response(status_code=200)

    @app.post("/v2/systemsharedmemory/unregister")
    @app.post("/v2/systemsharedmemory/region/{name}/unregister")
    async def system_unregister(request: Request, name: str = "") -> Response:
        registry.unregister(owner(request), name)
        return Response(status_code=200)

    @app.get("/v2/cudasharedmemory/status")
    @app.get("/v2/cudasharedmemory/region/{name}/status")
    async def cuda_status_route(request: Request, name: str = "") -> Response:
        return json_response(registry.status(owner(request), name, cuda=True))

    @app.post("/v2/cudasharedmemory/region/{name}/register")
    async def cuda_register(name: str, request: Request) -> Response:
        registry.check_enabled()  # a disabled extension says so before the body is read
        body = await json_body(request)
        handle = body.get("raw_handle")
        encoded = handle.get("b64") if isinstance(handle, dict) else None
        try:
            raw = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
        except binascii.Error:
            raw = None
        args = (owner(request), name, raw, body.get("device_id", 0), body.get("byte_size", 0))
        # a blocking call (the first one imports torch, then a device handle is opened): off the loop
        await asyncio.get_running_loop().run_in_executor(None, registry.register_cuda, *args)
        return Response(status_code=200)

    @app.post("/v2/cudasharedmemory/unregister")
    @app.post("/v2/cudasharedmemory/region/{name}/unregister")
    async def cuda_unregister_route(request: Request, name: str = "") -> Response:
        registry.unregister(owner(request), name, cuda=True)
        return Response(status_code=200)
