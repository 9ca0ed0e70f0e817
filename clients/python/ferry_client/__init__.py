"""Ferry client: KServe V2 / Triton-compatible HTTP and gRPC clients and the tensor codec."""

__version__ = "0.1.0"

from .errors import (
    DeadlineExceededError,
    FerryClientError,
    InvalidArgumentError,
    NotFoundError,
    ServerError,
    UnauthenticatedError,
    UnavailableError,
)
from .grpc import AsyncGrpcClient, GrpcClient
from .http import AsyncHttpClient, HttpClient
from .result import InferResult

__all__ = [
    "AsyncGrpcClient",
    "AsyncHttpClient",
    "DeadlineExceededError",
    "FerryClientError",
    "GrpcClient",
    "HttpClient",
    "InferResult",
    "InvalidArgumentError",
    "NotFoundError",
    "ServerError",
    "UnauthenticatedError",
    "UnavailableError",
    "__version__",
]
