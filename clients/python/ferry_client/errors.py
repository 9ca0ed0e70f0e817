"""Typed client exceptions, one per kind of failure a caller can act on.

HTTP and gRPC report the same failure with different codes; mapping both onto one hierarchy lets
callers write ``except NotFoundError`` once and switch protocols freely.
"""

from __future__ import annotations

import grpc

__all__ = [
    "DeadlineExceededError",
    "FerryClientError",
    "InvalidArgumentError",
    "NotFoundError",
    "ServerError",
    "UnauthenticatedError",
    "UnavailableError",
    "error_from_grpc_code",
    "error_from_http_status",
]


class FerryClientError(Exception):
    """Base of every client error: the server's message plus the wire code it came with."""

    def __init__(self, message: str, status: int | None = None, grpc_code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.grpc_code = grpc_code

    def __str__(self) -> str:
        """Show the code next to the message so logs say which kind of failure it was."""
        if self.status is not None:
            return f"[{self.status}] {self.message}"
        if self.grpc_code is not None:
            return f"[{self.grpc_code.name}] {self.message}"
        return self.message


class InvalidArgumentError(FerryClientError):
    """The request itself is wrong (400 / INVALID_ARGUMENT); retrying it unchanged will not help."""


class NotFoundError(FerryClientError):
    """The model, version or path does not exist (404 / NOT_FOUND)."""


class UnavailableError(FerryClientError):
    """The server or model cannot serve right now (503 / UNAVAILABLE, or no connection); may be retried."""


class DeadlineExceededError(FerryClientError):
    """The call ran out of time, on the client's clock or the server's (504 / DEADLINE_EXCEEDED)."""


class UnauthenticatedError(FerryClientError):
    """Credentials are missing, wrong or not allowed (401, 403 / UNAUTHENTICATED, PERMISSION_DENIED)."""


class ServerError(FerryClientError):
    """The server failed (5xx / INTERNAL) or answered with a code no other class covers."""


_BY_HTTP_STATUS: dict[int, type[FerryClientError]] = {
    400: InvalidArgumentError,
    401: UnauthenticatedError,
    403: UnauthenticatedError,
    404: NotFoundError,
    408: DeadlineExceededError,
    413: InvalidArgumentError,  # payload too large: the request must change, not be retried
    422: InvalidArgumentError,
    503: UnavailableError,
    504: DeadlineExceededError,
}

_BY_GRPC_CODE: dict[grpc.StatusCode, type[FerryClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: InvalidArgumentError,  # message larger than a limit
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: UnauthenticatedError,
}


def error_from_http_status(status: int, message: str) -> FerryClientError:
    """The exception for an HTTP error status; unknown codes become ServerError."""
    return _BY_HTTP_STATUS.get(status, ServerError)(message, status=status)


def error_from_grpc_code(code: grpc.StatusCode | None, message: str) -> FerryClientError:
    """The exception for a gRPC status code; unknown codes become ServerError."""
    cls = _BY_GRPC_CODE.get(code, ServerError) if code is not None else ServerError
    return cls(message, grpc_code=code)
