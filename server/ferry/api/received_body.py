"""The buffer a large REST body is received into, sized from its Content-Length and paid for in
admission before it is allocated; the request's binary tensors are then views of it.

In one process the buffer comes from the heap (``HeapBody``); an intake process receives the body
into a block of its hand-off arena (``intake.handoff.ArenaBody``), so the model process reads the
tensors where the kernel wrote them. The read itself is ``http_body_reads``' (``recv_into`` the
buffer), which also decides whether a body is read so; else it is read the usual way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from starlette.requests import Request

from .admission import Ticket
from .http_body_reads import RECEIVE_INTO, ReceivedBody

#: A plain body this large is received into its own buffer; a smaller one arrives whole in one read
#: (uvicorn hands it on without a pause) and goes the usual way.
DIRECT_BODY_BYTES = 64 * 1024


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
    """Whether the body may be read into a buffer of its declared length: large and not compressed
    (``receive_into`` itself turns down a chunked body or one without exactly one Content-Length)."""
    encoding = request.headers.get("content-encoding")
    return declared >= DIRECT_BODY_BYTES and (not encoding or encoding == "identity")


async def read_body_into(
    request: Request, declared: int, allocate: Callable[[], ReceivedBody]
) -> tuple[ReceivedBody, tuple[memoryview, ...]] | None:
    """The body read into the memory ``allocate`` counts and gives, with its parts read-only (for
    the tensors to view); None, allocating nothing, when the server's protocol cannot read it so
    (``http_body_reads.receive_into``): the caller reads it the usual way. Raises ClientDisconnect
    if the client goes first."""
    receive_into = request.scope.get(RECEIVE_INTO)
    body = None if receive_into is None else await receive_into(request.scope, declared, allocate)
    if body is None:
        return None
    return body, tuple(part.toreadonly() for part in body.parts)
