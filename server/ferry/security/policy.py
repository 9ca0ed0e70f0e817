"""Which calls need a bearer token: all of them, except health checks when the operator says so
and the dashboard's static page shell (no data in it).

One policy serves both front doors so REST and gRPC never disagree on what is public.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .tokens import TokenStore, bearer_token

#: Liveness / readiness, server and model: what load balancers and kubelet probes ask.
_PUBLIC_HEALTH_PATHS = re.compile(r"/v2/health/(live|ready)|/v2/models/[^/]+(/versions/[^/]+)?/ready")
_PUBLIC_HEALTH_METHODS = frozenset(
    f"/inference.GRPCInferenceService/{name}" for name in ("ServerLive", "ServerReady", "ModelReady")
)
#: The dashboard's page and static assets hold no data, and a browser cannot attach a bearer header
#: when it opens a page; its data (/dashboard/api/*) and every API call still need the token.
_PUBLIC_SHELL_PATHS = re.compile(r"/|/dashboard/static/[^?#]*")
#: The standard gRPC health service, should it ever be registered.
_GRPC_HEALTH_PREFIX = "/grpc.health.v1.Health/"

CHALLENGE = 'Bearer realm="ferry"'
MISSING_TOKEN = "authentication required: send 'Authorization: Bearer <token>'"
INVALID_TOKEN = "invalid bearer token"


@dataclass(frozen=True)
class AuthPolicy:
    """Bearer-token auth for every call; health checks public only if ``public_health``."""

    tokens: TokenStore
    public_health: bool = False
    public_shell: bool = True  # False where "/" serves data (the metrics port answers any path)

    def http_public(self, path: str) -> bool:
        if self.public_shell and _PUBLIC_SHELL_PATHS.fullmatch(path) is not None and ".." not in path:
            return True
        return self.public_health and _PUBLIC_HEALTH_PATHS.fullmatch(path) is not None

    def grpc_public(self, method: str) -> bool:
        return self.public_health and (method in _PUBLIC_HEALTH_METHODS or method.startswith(_GRPC_HEALTH_PREFIX))

    def denial(self, authorization: str | bytes | None) -> str | None:
        """None when the Authorization value carries a valid token, else the message for the caller."""
        token = bearer_token(authorization)
        if token is None:
            return MISSING_TOKEN
        return None if self.tokens.check(token) else INVALID_TOKEN
