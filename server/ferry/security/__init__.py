"""Authentication and transport security for the front doors.

``tokens`` holds the accepted bearer tokens, ``policy`` decides which calls need one, and
``http_auth`` / ``grpc_auth`` enforce it on REST and gRPC; ``tls`` builds server credentials and
``setup`` turns the server settings into all of that. Everything is off unless an option asks.
"""

from .errors import SecurityConfigError
from .setup import ServerSecurity

__all__ = ["SecurityConfigError", "ServerSecurity"]
