"""Errors that reach the caller, each with the HTTP status and gRPC code it maps to.

Front doors translate nothing themselves: they read ``http_status`` / ``grpc_code`` from here, so
REST and gRPC always agree on what a failure means.
"""

from __future__ import annotations

import enum

import grpc


class ErrorKind(enum.Enum):
    """The classes of failure a caller can act on, with their wire codes."""

    INVALID_ARGUMENT = (400, grpc.StatusCode.INVALID_ARGUMENT)
    NOT_FOUND = (404, grpc.StatusCode.NOT_FOUND)
    ALREADY_EXISTS = (409, grpc.StatusCode.ALREADY_EXISTS)
    UNAUTHENTICATED = (401, grpc.StatusCode.UNAUTHENTICATED)
    PERMISSION_DENIED = (403, grpc.StatusCode.PERMISSION_DENIED)
    PAYLOAD_TOO_LARGE = (413, grpc.StatusCode.RESOURCE_EXHAUSTED)
    RESOURCE_EXHAUSTED = (429, grpc.StatusCode.RESOURCE_EXHAUSTED)  # a per-client or server-wide count is used up
    UNAVAILABLE = (503, grpc.StatusCode.UNAVAILABLE)
    DEADLINE_EXCEEDED = (504, grpc.StatusCode.DEADLINE_EXCEEDED)
    CANCELLED = (499, grpc.StatusCode.CANCELLED)
    UNIMPLEMENTED = (501, grpc.StatusCode.UNIMPLEMENTED)
    INTERNAL = (500, grpc.StatusCode.INTERNAL)

    @property
    def http_status(self) -> int:
        return self.value[0]

    @property
    def grpc_code(self) -> grpc.StatusCode:
        return self.value[1]


class FerryError(Exception):
    """An error whose message is meant for the API caller."""

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind

    @property
    def http_status(self) -> int:
        return self.kind.http_status

    @property
    def grpc_code(self) -> grpc.StatusCode:
        return self.kind.grpc_code


class InvalidArgument(FerryError):
    kind = ErrorKind.INVALID_ARGUMENT


class NotFound(FerryError):
    kind = ErrorKind.NOT_FOUND


class Unavailable(FerryError):
    """Try again later; ``retry_after`` (seconds) becomes the HTTP Retry-After header when set."""

    kind = ErrorKind.UNAVAILABLE

    def __init__(self, message: str, kind: ErrorKind | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, kind)
        self.retry_after = retry_after


class Unimplemented(FerryError):
    kind = ErrorKind.UNIMPLEMENTED


class DecoupledModel(Unimplemented):
    """A streamed request reached a plane that runs one response per request, for a model that is
    decoupled: an intake process's plane says so (the model process found it decoupled), and its
    stream then relays the request to the model process, whose responses stream from there."""


class PayloadTooLarge(FerryError):
    kind = ErrorKind.PAYLOAD_TOO_LARGE


class ModelLoadError(FerryError):
    """A model version that cannot be loaded; the message becomes its UNAVAILABLE reason."""

    kind = ErrorKind.INVALID_ARGUMENT
