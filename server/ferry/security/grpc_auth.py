"""Bearer-token auth for the gRPC front door: a grpc.aio server interceptor.

The token travels as ``authorization: Bearer <token>`` call metadata (what tritonclient's
``headers=`` sends). A rejected call is aborted with UNAUTHENTICATED before its request message is
even deserialised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ..errors import ErrorKind
from .policy import AuthPolicy


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    """Let a call through when its method is public or its metadata carries a valid token."""

    def __init__(self, policy: AuthPolicy) -> None:
        self.policy = policy

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None or self.policy.grpc_public(details.method):
            return handler
        authorization = next(
            (value for key, value in details.invocation_metadata or () if key == "authorization"), None
        )
        denial = self.policy.denial(authorization)
        return handler if denial is None else _refusing(handler, denial)


def _refusing(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that only aborts (requests stay undecoded bytes)."""
    code = ErrorKind.UNAUTHENTICATED.grpc_code

    async def abort(_request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    serializer = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort, response_serializer=serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort, response_serializer=serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort, response_serializer=serializer)
    return grpc.unary_unary_rpc_method_handler(abort, response_serializer=serializer)
