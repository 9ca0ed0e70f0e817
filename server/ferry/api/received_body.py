"""The buffer a large REST body is received into, sized from its Content-Length and paid for in
admission before it is allocated; the request's binary tensors are then views of it.

In one process the buffer comes from the heap (``HeapBody``); an intake process receives the body
into a block of its hand-off arena (``intake.handoff.ArenaBody``), so the model process reads the
tensors where the kernel wrote them. The read itself is ``http_body_reads``' (``recv_into`` the
buffer); under another ASGI server the body's pieces are copied in as they come.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from starlette.requests import Request

from ..errors import InvalidArgument
from .admission import Ticket
from .http_body_reads import RECEIVE_INTO, scatter

#: A plain body this large is received into its own buffer; a smaller one arrives whole in one read
#: (uvicorn hands it on without a pause) and goes the usual way.
DIRECT_BODY_BYTES = 64 * 1024


class ReceivedBody(Protocol):
    """Memory for one body: ``parts`` (writable, filled in order, together exactly its declared
    length: the whole body, or its JSON header and its binary section apart) and ``release``,
    called once by the door when the request ends (what was handed on may keep it longer)."""

    parts: tuple[memoryview, ...]

    def release(self) -> None: ...


class HeapBody:
    """A body's buffer on the heap (one process): counted on the request's ticket, then allocated
    (``np.empty``: no zeroing; below the mmap threshold, so reused memory, not fresh pages)."""

    __slots__ = ("parts",)
    parts: tuple[memoryview, ...]

    def __init__(self, nbytes: int, ticket: Ticket) -> None:
        ticket.reserve(nbytes)  # the real peak, before it is paid (refused past the cap)
        self.parts = (np.empty(nbytes, np.uint8).data,)

    def release(self) -> None:
        """Nothing to do: the memory goes with the last view; the ticket's close uncounts it."""


def takes_direct_read(request: Request, declared: int) -> bool:
    """Whether the body is read into a buffer of its declared length: large, plain (identity,
    not chunked)."""
    headers = request.headers
    encoding = headers.get("content-encoding")
    return (
        declared >= DIRECT_BODY_BYTES
        and (not encoding or encoding == "identity")
        and "transfer-encoding" not in headers
    )


async def read_body_into(request: Request, body: ReceivedBody) -> tuple[memoryview, ...]:
    """The whole body in ``body.parts`` (returned read-only, for the tensors to view). Raises
    ClientDisconnect if the client goes first, InvalidArgument if the body is not its declared
    length (only another ASGI server lets that through: httptools reads exactly that many)."""
    parts = body.parts
    receive_into = request.scope.get(RECEIVE_INTO)
    if receive_into is None or not await receive_into(request.scope, parts):
        declared = sum(len(part) for part in parts)
        filled = 0
        async for chunk in request.stream():
            if filled + len(chunk) > declared:
                raise InvalidArgument(f"request body is longer than its Content-Length of {declared} bytes")
            filled = scatter(parts, filled, chunk)
        if filled != declared:
            raise InvalidArgument(f"request body of {filled} bytes is shorter than its Content-Length of {declared}")
    return tuple(part.toreadonly() for part in parts)
