"""Security settings -> what each listener needs: ASGI wrappers, gRPC interceptors and credentials."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from starlette.types import ASGIApp

from .grpc_auth import BearerAuthInterceptor
from .http_auth import BearerAuthMiddleware
from .identity import Identify, anonymous, token_identity
from .policy import AuthPolicy
from .tls import TlsFiles
from .tokens import TokenStore

if TYPE_CHECKING:
    from ..settings import Settings


@dataclass(frozen=True)
class ServerSecurity:
    """Auth policy (None: no auth) and TLS files (None: plaintext) for one server."""

    policy: AuthPolicy | None = None
    tls: TlsFiles | None = None
    protect_metrics: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerSecurity:
        """Read tokens and check TLS files now, so a mistake stops the server at start-up."""
        env_tokens = settings.auth_tokens.get_secret_value() if settings.auth_tokens else None
        tokens = TokenStore.from_options(settings.auth_token_file, env_tokens)
        policy = AuthPolicy(tokens, settings.auth_public_health) if tokens is not None else None
        tls = TlsFiles.from_options(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
        return cls(policy, tls, settings.auth_metrics)

    @property
    def identify(self) -> Identify:
        """Callers told apart by their bearer token, or all one anonymous client without auth."""
        return anonymous if self.policy is None else token_identity

    def http_app(self, app: ASGIApp) -> ASGIApp:
        return app if self.policy is None else BearerAuthMiddleware(app, self.policy)

    def metrics_app(self, app: ASGIApp) -> ASGIApp:
        """Metrics are public (like Triton's) unless --auth-metrics; then every path needs a token."""
        if self.policy is None or not self.protect_metrics:
            return app
        return BearerAuthMiddleware(app, AuthPolicy(self.policy.tokens, public_health=False, public_shell=False))

    def uvicorn_options(self) -> dict[str, Any]:
        """TLS options for the REST listener (the metrics listener stays plaintext)."""
        return {} if self.tls is None else self.tls.uvicorn_options()

    def grpc_interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [] if self.policy is None else [BearerAuthInterceptor(self.policy)]

    def grpc_credentials(self) -> grpc.ServerCredentials | None:
        return None if self.tls is None else self.tls.grpc_credentials()

    def describe(self) -> str:
        """One line for the start-up log."""
        auth = (
            "off"
            if self.policy is None
            else ("bearer tokens" + (" (health public)" if self.policy.public_health else ""))
        )
        tls = "off" if self.tls is None else ("mutual TLS" if self.tls.mutual else "on")
        return f"auth {auth}, TLS {tls}"
