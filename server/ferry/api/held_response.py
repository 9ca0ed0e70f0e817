"""A response that keeps its admission until the client has taken it.

Starlette's response returns as soon as its body is handed to the transport, whose buffer then
holds it however slowly the client reads: answers that nobody reads cost memory that
``--max-inflight-bytes`` did not see. This one sends a large body, then an empty last chunk:
uvicorn waits for the transport's buffer to drain before it writes a chunk, so the last send
returns only once the body is in the kernel (or the connection is gone, e.g. cut by the send-rate
check in ``connection_limits.py``), and only then is the request's admission released.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

#: Bodies up to this size never pause the transport (its high-water mark is 64 KiB): sent as usual.
SMALL_BODY = 64 * 1024


class HeldResponse(Response):
    """A ``Response`` calling ``release`` once its body has been written, or the client has gone."""

    def __init__(self, content: bytes, release: Callable[[], Any], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            if len(self.body) <= SMALL_BODY:
                await send({"type": "http.response.body", "body": self.body})
                return
            await send({"type": "http.response.body", "body": self.body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})  # after the drain
        finally:
            self._release()
