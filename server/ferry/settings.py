"""Server options: every flag of ``ferry serve`` also reads a ``FERRY_*`` environment variable,
so a container or a Kubernetes manifest configures the server without wrapper scripts."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from .repository.manager import ControlMode

MIB = 1024 * 1024


class Settings(BaseSettings):
    """Options of ``ferry serve``. Flags win over environment variables, which win over defaults."""

    model_config = SettingsConfigDict(env_prefix="FERRY_", protected_namespaces=())

    model_repository: Path = Field(Path("model_repo"), description="model repository directory")
    host: str = Field("127.0.0.1", description="address to bind (0.0.0.0 to serve other hosts)")
    http_port: int = Field(8000, ge=0, le=65535, description="REST port (0 disables REST)")
    grpc_port: int = Field(8001, ge=0, le=65535, description="gRPC port (0 disables gRPC)")
    metrics_port: int = Field(8002, ge=0, le=65535, description="Prometheus /metrics port (0 disables)")
    model_control_mode: ControlMode = Field(ControlMode.NONE, description="none | explicit | poll")
    load_model: list[str] = Field(default_factory=list, description="models to load at start (explicit mode)")
    repository_poll_secs: float = Field(15.0, gt=0, description="rescan interval in poll mode")
    exit_timeout_secs: float = Field(30.0, ge=0, description="time allowed to drain at shutdown")
    http_max_body_bytes: int = Field(256 * MIB, gt=0, description="largest accepted REST body")
    grpc_max_message_bytes: int = Field(256 * MIB, gt=0, description="largest gRPC message")
    dashboard: bool = Field(True, description="serve the web dashboard at / on the REST port")
    max_inflight_requests: int = Field(
        1024, ge=0, description="requests received, queued or running at once; more get 503/UNAVAILABLE (0 = no cap)"
    )
    max_inflight_bytes: int = Field(
        1024 * MIB, ge=0, description="request bytes held at once; more get 503/UNAVAILABLE (0 = no cap)"
    )
    max_tensor_elements: int = Field(1 << 26, gt=0, description="elements per request tensor")
    max_bytes_elements: int = Field(1 << 20, gt=0, description="BYTES elements per request tensor")
    max_inputs_per_request: int = Field(128, gt=0, description="input tensors per request")
    http_max_json_bytes: int = Field(64 * MIB, gt=0, description="JSON part of a REST inference body")
    log_level: str = Field("info", description="debug | info | warning | error")
    log_format: str = Field("default", description="default | ISO8601 | json (one JSON object per line)")
    trace_file: Path | None = Field(None, description="file that receives traced requests' spans (JSON lines)")
    trace_otlp_endpoint: str | None = Field(None, description="OTLP/HTTP endpoint for traced requests' spans")
    intake_processes: int = Field(
        0,
        ge=0,
        le=64,
        description="processes that serve the REST and gRPC ports and hand requests to the model process "
        "(0 = one per four cores, up to eight; 1 = one process, no hand-off)",
    )
    intake_arena_bytes: int = Field(
        64 * MIB, ge=4096, description="shared memory per intake process and direction for tensors in flight"
    )
    cache_size: int = Field(
        0, ge=0, description="response cache bytes, shared by models with response_cache { enable: true } (0 = none)"
    )

    # --- connection limits (see docs/reliability.md) --------------------------------------------
    http_max_connections: int = Field(1000, ge=0, description="open REST connections; more get 503 and close")
    http_header_timeout_secs: float = Field(10.0, ge=0, description="time to send a request line and headers")
    http_max_header_bytes: int = Field(64 * 1024, ge=0, description="request line and headers of one request")
    http_min_body_rate: int = Field(1024, ge=0, description="slowest accepted body upload (bytes/s) after the grace")
    http_body_grace_secs: float = Field(10.0, ge=0, description="time a body may take before its rate counts")
    http_keep_alive_timeout_secs: float = Field(5.0, gt=0, description="idle keep-alive connections close after")
    max_response_bytes: int = Field(
        256 * MIB, gt=0, description="largest inference response; larger ones are refused before they are built"
    )
    grpc_max_concurrent_streams: int = Field(1000, gt=0, description="concurrent calls per gRPC connection")
    grpc_max_concurrent_rpcs: int = Field(
        2048, gt=0, description="unfinished gRPC calls server-wide; more get RESOURCE_EXHAUSTED"
    )
    grpc_min_ping_interval_secs: float = Field(10.0, ge=0, description="clients may ping no more often than this")
    grpc_max_ping_strikes: int = Field(2, ge=0, description="too-frequent pings tolerated before GOAWAY")
    grpc_max_metadata_bytes: int = Field(16 * 1024, gt=0, description="request metadata (headers) of one call")
    grpc_max_connection_idle_secs: float = Field(300.0, gt=0, description="idle gRPC connections close after")
    grpc_max_calls_per_peer: int = Field(
        1024, gt=0, description="unfinished gRPC calls of one client address (per process); more get RESOURCE_EXHAUSTED"
    )
    grpc_request_timeout_secs: float = Field(
        60.0, gt=0, description="a unary gRPC call's request message must arrive within this (DEADLINE_EXCEEDED)"
    )

    # --- security (see README "Security") ---------------------------------------------------------
    auth_token_file: Path | None = Field(None, description="file of accepted bearer tokens (one per line, # comments)")
    # Environment only (FERRY_AUTH_TOKENS, comma or space separated): a flag would show tokens in `ps`.
    auth_tokens: SecretStr | None = Field(None, description="accepted bearer tokens")
    auth_public_health: bool = Field(False, description="health and readiness checks need no token")
    auth_metrics: bool = Field(False, description="the metrics port needs a bearer token too")
    allow_python_models: bool = Field(
        False, description="load Triton Python models (model.py): code from the repository runs in the server"
    )
    tls_cert: Path | None = Field(None, description="PEM server certificate (chain) for REST and gRPC")
    tls_key: Path | None = Field(None, description="PEM private key of --tls-cert")
    tls_client_ca: Path | None = Field(None, description="PEM CA bundle; clients must present a certificate it signed")
