"""Server options, the single source of ``ferry serve``'s flags and ``FERRY_*`` environment variables.

Each field is one option: its name gives the flag (``--http-port``) and the variable
(``FERRY_HTTP_PORT``), its description the flag's help, its type and default the flag's parsing,
choices and shown default (``cli_settings`` builds the parser from these fields). A ``Flag`` in a
field's annotation adds what only the command line needs: aliases, a metavar, a help heading.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .types import ControlMode

MIB = 1024 * 1024

LIMITS = "connection limits"
SECURITY = "security"
#: Headings of ``ferry serve --help`` (flags without a group are listed first) and what each is for.
FLAG_GROUPS = {
    LIMITS: "against slow and hostile clients (docs/reliability.md)",
    SECURITY: "bearer tokens, TLS and what the repository may run",
}


@dataclass(frozen=True)
class Flag:
    """What an option needs on the command line beyond its field: other names, a metavar, a heading.

    ``env_only`` (the reason) keeps an option off the command line: a flag would show it in ``ps``."""

    aliases: tuple[str, ...] = ()
    metavar: str | None = None
    group: str | None = None
    env_only: str = ""


LIMIT = Flag(group=LIMITS)


class Settings(BaseSettings):
    """Options of ``ferry serve``. Flags win over environment variables, which win over defaults."""

    model_config = SettingsConfigDict(env_prefix="FERRY_", protected_namespaces=())

    model_repository: Annotated[Path, Flag(aliases=("--model-repo",), metavar="DIR")] = Field(
        Path("model_repo"), description="model repository directory"
    )
    host: str = Field("127.0.0.1", description="address to bind (0.0.0.0 to serve other hosts)")
    http_port: int = Field(8000, ge=0, le=65535, description="REST port (0 disables REST)")
    grpc_port: int = Field(8001, ge=0, le=65535, description="gRPC port (0 disables gRPC)")
    metrics_port: int = Field(8002, ge=0, le=65535, description="Prometheus /metrics port (0 disables)")
    model_control_mode: ControlMode = Field(
        ControlMode.NONE,
        description="none: load all at start; explicit: the load/unload API; poll: rescan the repository",
    )
    load_model: Annotated[list[str], Flag(metavar="NAME")] = Field(
        default_factory=list, description="model to load at start in explicit mode (repeatable; '*' loads all)"
    )
    repository_poll_secs: float = Field(15.0, gt=0, description="rescan interval in poll mode")
    exit_timeout_secs: Annotated[float, Flag(aliases=("--exit-timeout",))] = Field(
        30.0, ge=0, description="time allowed to drain at shutdown"
    )
    http_max_body_bytes: int = Field(256 * MIB, gt=0, description="largest accepted REST body")
    grpc_max_message_bytes: int = Field(
        16 * MIB,
        gt=0,
        description="largest gRPC message: gRPC reads a message whole before admission sees it, so each read it is "
        "asked for is charged this much against --grpc-receive-bytes (lower it for more turns of small messages, "
        "raise both for larger ones)",
    )
    dashboard: bool = Field(True, description="serve the web dashboard at / on the REST port")
    strict_readiness: bool = Field(
        False,
        description="/v2/health/ready answers ready only while every model the repository or --load-model "
        "names is READY (as Triton's --strict-readiness, whose default is on)",
    )
    max_inflight_requests: int = Field(
        1024, ge=0, description="requests received, queued or running at once; more get 503/UNAVAILABLE (0 = no cap)"
    )
    max_streamed_requests: int = Field(
        512,
        ge=0,
        description="requests to decoupled models open at once, server-wide (each holds an in-flight slot until its "
        "last response): kept below --max-inflight-requests so streams leave room for other requests; more get "
        "429/RESOURCE_EXHAUSTED (0 = no cap)",
    )
    streamed_responses_per_turn: Annotated[int, LIMIT] = Field(
        64,
        gt=0,
        description="most responses of decoupled models handed on per turn of the event loop (fewer while turns "
        "take over 4 ms, down to one): other requests never wait behind more than this much stream work",
    )
    max_streamed_requests_per_peer: Annotated[int, LIMIT] = Field(
        256,
        gt=0,
        description="requests to decoupled models open at once from one client address, over its gRPC streams and "
        "REST generate calls (per process); more get 429/RESOURCE_EXHAUSTED",
    )
    max_inflight_bytes: int = Field(
        256 * MIB,
        ge=0,
        description="memory requests may hold at once (bodies, decoded tensors and images, answers until "
        "written); more get 503/UNAVAILABLE, a request needing more alone 413 (0 = no cap)",
    )
    max_engine_memory_bytes: int = Field(
        384 * MIB,
        ge=0,
        description="engines' working memory executions may hold at once in the model process (a model's "
        "working_memory_factor times an execution's input bytes); more get 503/UNAVAILABLE, an execution "
        "needing more alone 413 (0 = no cap)",
    )
    max_tensor_elements: int = Field(1 << 26, gt=0, description="elements per request tensor (before decoding)")
    max_bytes_elements: int = Field(1 << 20, gt=0, description="BYTES elements per request tensor")
    max_variable_input_elements: int = Field(
        0,
        ge=0,
        description="elements per batch item of an input whose config dims vary (-1), checked before the "
        "model runs, for models whose config sets no max_variable_elements parameter (0 = no limit)",
    )
    max_inputs_per_request: int = Field(128, gt=0, description="input tensors per request")
    http_max_json_bytes: int = Field(64 * MIB, gt=0, description="JSON part of a REST inference body")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log severity shown")
    log_format: Literal["default", "ISO8601", "json"] = Field(
        "default", description="log line format (json: one JSON object per line)"
    )
    trace_file: Annotated[Path | None, Flag(metavar="FILE")] = Field(
        None, description="append traced requests' spans to FILE as JSON lines"
    )
    trace_otlp_endpoint: Annotated[str | None, Flag(metavar="URL")] = Field(
        None, description="export traced requests' spans over OTLP/HTTP (needs the otlp extra: pip install '.[otlp]')"
    )
    intake_processes: Annotated[int, Flag(metavar="N")] = Field(
        0,
        ge=0,
        le=64,
        description="processes that serve the REST and gRPC ports and hand requests to the model process "
        "(0 = one per four cores, up to eight; 1 = one process, no hand-off)",
    )
    intake_arena_bytes: int = Field(
        64 * MIB, ge=4096, description="shared memory per intake process and direction for tensors in flight"
    )
    image_workers: Annotated[int, Flag(metavar="N")] = Field(
        0, ge=0, le=1024, description="threads that decode and pre-process images (0 = one per core)"
    )
    cache_size: Annotated[int, Flag(metavar="BYTES")] = Field(
        0,
        ge=0,
        description="response cache bytes (Triton's --cache-config local,size=), shared by models with "
        "response_cache { enable: true } (0 = none)",
    )

    # --- connection limits (see docs/reliability.md) --------------------------------------------
    http_max_connections: Annotated[int, LIMIT] = Field(
        1000, ge=0, description="open REST connections; more get 503 and close"
    )
    http_header_timeout_secs: Annotated[float, LIMIT] = Field(
        10.0, ge=0, description="time to send a request line and headers"
    )
    http_max_header_bytes: Annotated[int, LIMIT] = Field(
        64 * 1024, ge=0, description="request line and headers of one request"
    )
    http_min_body_rate: Annotated[int, LIMIT] = Field(
        1024, ge=0, description="slowest accepted body upload (bytes/s) after the grace"
    )
    http_body_grace_secs: Annotated[float, LIMIT] = Field(
        10.0, ge=0, description="time a body may take before its rate counts"
    )
    http_keep_alive_timeout_secs: Annotated[float, LIMIT] = Field(
        5.0, gt=0, description="idle keep-alive connections close after"
    )
    max_response_bytes: Annotated[int, LIMIT] = Field(
        256 * MIB, gt=0, description="largest inference response; larger ones are refused before they are built"
    )
    grpc_max_concurrent_streams: Annotated[int, LIMIT] = Field(
        1000, gt=0, description="concurrent calls per gRPC connection"
    )
    grpc_max_concurrent_rpcs: Annotated[int, LIMIT] = Field(
        2048, gt=0, description="unfinished gRPC calls server-wide; more get RESOURCE_EXHAUSTED naming this flag"
    )
    grpc_min_ping_interval_secs: Annotated[float, LIMIT] = Field(
        10.0, ge=0, description="clients may ping no more often than this"
    )
    grpc_max_ping_strikes: Annotated[int, LIMIT] = Field(
        2, ge=0, description="too-frequent pings tolerated before GOAWAY"
    )
    grpc_max_metadata_bytes: Annotated[int, LIMIT] = Field(
        16 * 1024, gt=0, description="request metadata (headers) of one call"
    )
    grpc_max_connection_idle_secs: Annotated[float, LIMIT] = Field(
        300.0, gt=0, description="idle gRPC connections close after"
    )
    grpc_max_calls_per_peer: Annotated[int, LIMIT] = Field(
        1024,
        gt=0,
        description="unfinished gRPC calls of one client address (per process, at most half of its share of "
        "--grpc-max-concurrent-rpcs, so one address never holds every slot); more get RESOURCE_EXHAUSTED",
    )
    grpc_max_stream_requests: Annotated[int, LIMIT] = Field(
        128,
        gt=0,
        description="requests to decoupled models open at once on one ModelStreamInfer stream; more are answered "
        "with a RESOURCE_EXHAUSTED error and the stream goes on",
    )
    grpc_reads_per_peer: Annotated[int, LIMIT] = Field(
        2,
        gt=0,
        description="request messages of one client address received at once (split among intake processes, "
        "at least one each): grpc holds a message whole before admission sees it; the client's other unary "
        "calls wait their turn",
    )
    grpc_stream_reads_per_peer: Annotated[int, LIMIT] = Field(
        8,
        ge=0,
        description="streams (ModelStreamInfer) of one client address waiting for a request message at once (split "
        "among intake processes, at least one each), a pool apart from the unary calls': bounds what a client's "
        "streams hold before admission sees it; more streams of one address than this wait on each other; "
        "0: no turns, each open stream may receive one message",
    )
    grpc_receive_bytes: Annotated[int, LIMIT] = Field(
        96 * MIB,
        ge=MIB,
        le=64 * 1024 * MIB,
        description="bytes of request messages all gRPC clients together may be sending at once before admission "
        "sees them (split among intake processes): each read asked of grpc, a unary call's or a stream's, may "
        "receive up to --grpc-max-message-bytes, so this over that is the number of messages received at once "
        "(at least two per process, one when streams take no turns; streams hold at most all but one, so unary "
        "calls never wait behind idle streams); lower --grpc-max-message-bytes for more turns of small messages",
    )
    grpc_idle_stream_secs: Annotated[float, LIMIT] = Field(
        60.0,
        gt=0,
        description="a stream holding a message turn with no traffic for this long is ended (UNAVAILABLE) once "
        "another stream of its address waits for a turn",
    )
    grpc_request_timeout_secs: Annotated[float, LIMIT] = Field(
        60.0, gt=0, description="a unary gRPC call's request message must arrive within this (DEADLINE_EXCEEDED)"
    )
    grpc_stream_first_message_secs: Annotated[float, LIMIT] = Field(
        60.0,
        gt=0,
        description="a stream (ModelStreamInfer) whose first request message has not arrived within this of its "
        "start (waiting for a message turn included) is ended (DEADLINE_EXCEEDED), freeing its call slot",
    )
    grpc_write_timeout_secs: Annotated[float, LIMIT] = Field(
        30.0,
        gt=0,
        description="a call whose client has not taken a response message within this (plus 1 s per MiB) is "
        "ended alone (DEADLINE_EXCEEDED), which frees the answer; its connection is closed only if that fails",
    )

    # --- security (see README "Security") ---------------------------------------------------------
    auth_token_file: Annotated[Path | None, Flag(metavar="FILE", group=SECURITY)] = Field(
        None, description="require 'Authorization: Bearer <token>' with a token from FILE (one per line, # comments)"
    )
    auth_tokens: Annotated[SecretStr | None, Flag(env_only="a flag would show the tokens in ps")] = Field(
        None, description="accepted bearer tokens, comma or space separated"
    )
    auth_public_health: Annotated[bool, Flag(group=SECURITY)] = Field(
        False, description="let health, readiness and model-ready checks through without a token"
    )
    auth_metrics: Annotated[bool, Flag(group=SECURITY)] = Field(
        False, description="require a token on the metrics port too"
    )
    allow_python_models: Annotated[bool, Flag(group=SECURITY)] = Field(
        False, description="load Triton Python models (model.py): code from the repository runs in the server"
    )
    allow_shared_memory: Annotated[bool, Flag(group=SECURITY)] = Field(
        False,
        description="serve system shared memory (Triton's extension): clients on this host register /dev/shm "
        "objects that the server reads inputs from and writes outputs to",
    )
    shared_memory_owner_uids: Annotated[
        list[int], Flag(aliases=("--shared-memory-owner-uid",), metavar="UID", group=SECURITY)
    ] = Field(
        default_factory=list,
        description="a user whose /dev/shm objects may be registered (repeatable; none: the server's own uid)",
    )
    shared_memory_max_regions: Annotated[int, Flag(metavar="N", group=SECURITY)] = Field(
        256, gt=0, description="registered shared memory regions, all clients together"
    )
    shared_memory_max_regions_per_client: Annotated[int, Flag(metavar="N", group=SECURITY)] = Field(
        64, gt=0, description="registered shared memory regions per client (bearer token; one client without auth)"
    )
    tls_cert: Annotated[Path | None, Flag(metavar="PEM", group=SECURITY)] = Field(
        None, description="serve REST and gRPC over TLS with this PEM certificate (chain)"
    )
    tls_key: Annotated[Path | None, Flag(metavar="PEM", group=SECURITY)] = Field(
        None, description="PEM private key of --tls-cert"
    )
    tls_client_ca: Annotated[Path | None, Flag(metavar="PEM", group=SECURITY)] = Field(
        None, description="PEM CA bundle; clients must present a certificate it signed (mutual TLS)"
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_case_level(cls, value: object) -> object:
        """FERRY_LOG_LEVEL=DEBUG worked before the level had choices; it still does."""
        return value.lower() if isinstance(value, str) else value
