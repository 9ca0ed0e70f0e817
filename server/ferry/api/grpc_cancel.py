"""End one gRPC server call in grpc core, as if its client had cancelled it.

Why: a client that stops reading leaves grpc core holding the answer it is writing, and grpc.aio
offers a server no way to end that call: aborting only queues a status behind the unwritten
message, and cancelling the handler's task leaves the call alive in core. Core itself can cancel
one call (``grpc_call_cancel_with_status``): it sends that stream, and only that stream, its status
and RST_STREAM, fails the call's pending operations (so the answer's memory is freed) and completes
its "close" operation, after which grpc.aio finishes the call exactly as when a client cancels:
the handler's task ends, the done callbacks run, the call is released. The client's other calls
on the same HTTP/2 connection go on.

grpcio exports no core function, but its Python ``Call`` object can cancel the call it wraps, and
the servicer context lends such an object, wrapping its own call, to the module function
``cygrpc.peer_identities`` (``context.peer_identities()``). ``end_call`` stands in for that
function for the length of one ``peer_identities()`` call, on this thread only, and cancels the
call it is given. When a grpcio version stops doing this, ``end_call`` says so (False) and the
caller falls back to closing the client's connection (``grpc_calls.WriteDeadlines``).

grpc.aio logs an ERROR for the failed write of a call ended this way; ``grpc_calls.py`` drops it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import grpc
from grpc._cython import cygrpc  # type: ignore[attr-defined]  # (grpcio ships no stubs for it)

log = logging.getLogger(__name__)

GRPC_CALL_OK = 0


def end_call(context: grpc.aio.ServicerContext, code: grpc.StatusCode, details: str) -> bool:
    """Cancel ``context``'s call in grpc core with ``code`` and ``details`` (the client gets that
    status, then RST_STREAM); True as well when grpc has already released the call (it is over),
    False when this grpcio gave no way to cancel it (nothing was done)."""
    results: list[int] = []
    original = cygrpc.peer_identities
    owner = threading.get_ident()

    def cancel(call: Any) -> Any:
        if threading.get_ident() != owner:  # another thread's lookup: not ours to touch
            return original(call)
        # nothing may escape: the context must get its call back (it releases it on the way out)
        try:
            results.append(call.cancel(code.value[0], details) if call.is_valid else GRPC_CALL_OK)
        except Exception:
            log.exception("could not cancel a gRPC call")
        return None

    cygrpc.peer_identities = cancel
    try:
        context.peer_identities()
    finally:
        cygrpc.peer_identities = original
    return results == [GRPC_CALL_OK]
