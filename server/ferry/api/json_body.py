"""JSON object request bodies: the repository API and the protocol extensions (logging, trace)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ferry_client.codec import CodecError, dumps, loads_json

from ..errors import InvalidArgument, PayloadTooLarge

MAX_SETTINGS_BYTES = 64 * 1024


def json_response(content: Any, status: int = 200) -> Response:
    return Response(dumps(content), status_code=status, media_type="application/json")


async def json_object(request: Request, limit: int = MAX_SETTINGS_BYTES) -> dict[str, Any]:
    """The body as a JSON object ({} when empty); settings bodies are small, so the limit is too."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"settings body exceeds {limit} bytes")
    return parse_json_object(body)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; empty means {}."""
    if not body.strip():
        return {}
    try:
        parsed = loads_json(body)
    except CodecError as exc:
        raise InvalidArgument(str(exc)) from None
    if not isinstance(parsed, dict):
        raise InvalidArgument("request body must be a JSON object")
    return parsed
