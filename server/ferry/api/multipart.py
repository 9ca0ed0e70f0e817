"""The files of a multipart/form-data body that has already been read.

Why: Starlette's ``request.form()`` reads the request stream itself, outside the body limit and
admission, so an upload could hold any amount of memory uncounted. The image endpoints read the
body as every other body is read (limited, counted as it arrives, decompressed), then parse it here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from starlette.datastructures import Headers
from starlette.formparsers import MultiPartException, MultiPartParser

from ..errors import InvalidArgument
from .admission import Ticket

#: Parts (files and fields) one body may hold.
MAX_PARTS = 1024


async def multipart_files(headers: Headers, body: bytes, ticket: Ticket) -> list[bytes]:
    """Every file part's bytes, counted against ``ticket`` (a malformed body is a 400)."""

    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    parser = MultiPartParser(headers, stream(), max_files=MAX_PARTS, max_fields=MAX_PARTS)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidArgument(f"malformed multipart body: {exc.message}") from None
    try:
        files = [await item.read() for _, item in form.multi_items() if not isinstance(item, str)]
        ticket.reserve(sum(len(data) for data in files))
    finally:
        await form.close()
    return files
