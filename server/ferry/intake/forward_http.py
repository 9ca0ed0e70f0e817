"""TEMPORARY (replaced by the forward branch)."""

from __future__ import annotations

import httpx


class ForwardToCore:
    def __init__(self, uds_path: str) -> None:
        self._client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=uds_path), base_url="http://core")

    async def __call__(self, scope, receive, send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        url = scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.lower() not in (b"host", b"connection")]
        response = await self._client.request(scope["method"], url, content=body, headers=headers)
        await send({"type": "http.response.start", "status": response.status_code, "headers": [(k.encode(), v.encode()) for k, v in response.headers.multi_items() if k.lower() not in ("transfer-encoding", "connection")]})
        await send({"type": "http.response.body", "body": response.content})

    async def aclose(self) -> None:
        await self._client.aclose()
