"""A listener's refused connections linger on its own count (``ConnectionGuard``), not on one the
whole process shares: a flood that spends one listener's budget of clean goodbyes leaves another's
whole. Real loopback sockets; the test fills the budget itself rather than sending a flood."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ferry.api.connection_limits import MAX_LINGERING, ConnectionGuard, HttpConnectionLimits

ANSWER = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"


@asynccontextmanager
async def _connection() -> AsyncIterator[tuple[asyncio.Transport, asyncio.StreamReader]]:
    """The server side's transport of one loopback connection, and the client's reader (both
    ends' writers are kept: a writer collected closes its transport)."""
    accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        reader, client = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        ours = await accepted.get()
        assert isinstance(ours.transport, asyncio.Transport)
        yield ours.transport, reader
        client.close()
    finally:
        server.close()


async def test_each_listener_lingers_on_its_own_count() -> None:
    flooded = ConnectionGuard(HttpConnectionLimits())
    quiet = ConnectionGuard(HttpConnectionLimits())
    flooded.lingering = MAX_LINGERING  # a flood of refusals is draining on this listener
    async with _connection() as (transport, reader):
        quiet.answer_and_close(transport, ANSWER)
        assert quiet.lingering == 1 and not transport.is_closing()  # drained, not closed at once
        assert await reader.read() == ANSWER  # and our side finished (EOF)
        assert flooded.lingering == MAX_LINGERING
        for _ in range(200):  # closed once it has drained (LINGER_S)
            if not quiet.lingering:
                break
            await asyncio.sleep(0.05)
        assert quiet.lingering == 0 and transport.is_closing()
    async with _connection() as (transport, reader):
        flooded.answer_and_close(transport, ANSWER)
        assert transport.is_closing() and flooded.lingering == MAX_LINGERING  # past its budget: closed now
        assert await reader.read() == ANSWER
