"""TLS for both front doors from one certificate/key pair, with optional client-certificate checks.

With a client CA (``--tls-client-ca``) both REST and gRPC require a client certificate signed by
it (mutual TLS); without one they only encrypt and authenticate the server.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from .errors import SecurityConfigError


class TlsConfigError(SecurityConfigError):
    """TLS options that do not fit together or files that cannot be read."""


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None

    @classmethod
    def from_options(cls, cert: Path | None, key: Path | None, client_ca: Path | None) -> TlsFiles | None:
        """The TLS files for the server options, or None when TLS is off; checks they fit together."""
        if cert is None and key is None:
            if client_ca is not None:
                raise TlsConfigError("--tls-client-ca needs --tls-cert and --tls-key")
            return None
        if cert is None or key is None:
            raise TlsConfigError("TLS needs both --tls-cert and --tls-key")
        files = cls(cert, key, client_ca)
        for path in (cert, key, client_ca):
            if path is not None and not path.is_file():
                raise TlsConfigError(f"TLS file {path} does not exist")
        files.ssl_context()  # fail at start-up, naming the problem, rather than on the first handshake
        return files

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def ssl_context(self) -> ssl.SSLContext:
        """The REST side's context: TLS 1.2+, client certificates required when a client CA is set."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
            if self.client_ca is not None:
                context.load_verify_locations(cafile=self.client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load TLS certificate, key or client CA: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED if self.client_ca is not None else ssl.CERT_NONE
        return context

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for ``uvicorn.Config`` (uvicorn builds its own context from them)."""
        options: dict[str, Any] = {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}
        if self.client_ca is not None:
            options["ssl_ca_certs"] = str(self.client_ca)
            options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return options

    def grpc_credentials(self) -> grpc.ServerCredentials:
        root = self.client_ca.read_bytes() if self.client_ca is not None else None
        return grpc.ssl_server_credentials(
            [(self.key.read_bytes(), self.cert.read_bytes())],
            root_certificates=root,
            require_client_auth=root is not None,
        )
