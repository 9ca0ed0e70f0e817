"""Triton's trace extension (``/v2/trace/setting``, per model too; gRPC ``TraceSetting``) on
OpenTelemetry.

A sampled request becomes one span tree: ``InferRequest`` (arrival to response) with children
``queue``, ``compute_input``, ``infer`` and ``compute_output`` at the scheduler's own timestamps,
and events named like Triton's trace timestamps. Spans go to the exporters given at start-up: a file
of JSON lines (``--trace-file``) and/or OTLP over HTTP (``--trace-otlp-endpoint``), or, in tests, the
SDK's in-memory exporter. Settings use Triton's names and string values; ``trace_file``,
``trace_mode`` and ``log_frequency`` are start-up choices a network caller cannot change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fastapi import APIRouter, Request
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Tracer, set_span_in_context
from starlette.responses import Response

from ferry_client.protocol import grpc_service_pb2 as pb

from .. import __version__
from ..cli_errors import install_hint
from ..errors import InvalidArgument
from ..scheduling.timeline import EPOCH_OFFSET_NS, Timeline
from .json_body import json_object, json_response

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
DEFAULTS: dict[str, list[str]] = {
    "trace_level": ["OFF"],
    "trace_rate": ["1000"],
    "trace_count": ["-1"],
    "log_frequency": ["0"],
}
READ_ONLY = ("trace_file", "trace_mode", "log_frequency")


def file_exporter(path: Path) -> SpanExporter:
    """The SDK's span exporter writing one JSON span per line to ``path`` (appending)."""
    stream: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - owned by the exporter
    return ConsoleSpanExporter(out=stream, formatter=lambda span: span.to_json(indent=None) + "\n")


def otlp_exporter(endpoint: str) -> SpanExporter:
    """OTLP over HTTP (protobuf); the exporter package is the optional ``ferry[otlp]`` extra."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise InvalidArgument(
            f"--trace-otlp-endpoint needs opentelemetry-exporter-otlp-proto-http: {install_hint('otlp')}"
        ) from None
    return OTLPSpanExporter(endpoint=endpoint)


@dataclass
class TraceHandle:
    """A request chosen for tracing: its arrival time and the timeline the scheduler fills."""

    model: str
    request_id: str
    start_ns: int
    timeline: Timeline


class RequestTracing:
    """Trace settings (server-wide and per model), sampling, and span export for inference."""

    def __init__(
        self,
        exporters: Iterable[SpanExporter] = (),
        trace_file: str = "",
        trace_mode: str = "opentelemetry",
        provider: TracerProvider | None = None,
    ) -> None:
        self.trace_file = trace_file
        self.trace_mode = trace_mode
        if provider is None:
            provider = TracerProvider(resource=Resource.create({"service.name": "ferry"}))
            for exporter in exporters:
                provider.add_span_processor(BatchSpanProcessor(exporter))
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("ferry", __version__)
        self._global: dict[str, list[str]] = {k: list(v) for k, v in DEFAULTS.items()}
        self._models: dict[str, dict[str, list[str]]] = {}
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._any_on = self._some_level_on()  # read without the lock on every request (see start)

    # --- settings ---------------------------------------------------------------------------------

    def settings(self, model: str = "") -> dict[str, Any]:
        """The effective settings in Triton's JSON form (numbers as strings, level as a list)."""
        merged = {**self._global, **self._models.get(model, {})} if model else dict(self._global)
        out: dict[str, Any] = {key: (value if key == "trace_level" else value[0]) for key, value in merged.items()}
        out["trace_file"] = self.trace_file
        out["trace_mode"] = self.trace_mode
        return out

    def update(self, changes: Mapping[str, list[str] | None], model: str = "") -> dict[str, Any]:
        """Apply changes (``None`` or an empty list resets a setting) after checking all of them."""
        checked = {key: _check(key, values, self, model) for key, values in changes.items()}
        with self._lock:
            target = self._models.setdefault(model, {}) if model else self._global
            for key, values in checked.items():
                if key in READ_ONLY:
                    continue
                if values is None:
                    if model:
                        target.pop(key, None)
                    else:
                        target[key] = list(DEFAULTS[key])
                else:
                    target[key] = values
            self._seen.pop(model, None) if model else self._seen.clear()
            self._any_on = self._some_level_on()
        return self.settings(model)

    @property
    def any_on(self) -> bool:
        """Whether some setting traces (read without the lock, as ``start`` reads it): while none
        does, a request needs no trace decision at all (``RequestPath.queue_planned``)."""
        return self._any_on

    def _some_level_on(self) -> bool:
        """Whether any setting (global or a model's) traces: when none does, ``start`` answers at once."""
        levels = [
            self._global["trace_level"],
            *(own["trace_level"] for own in self._models.values() if "trace_level" in own),
        ]
        return any("TIMESTAMPS" in level for level in levels)

    # --- sampling and spans ----------------------------------------------------------------------

    def start(self, model: str, request_id: str) -> TraceHandle | None:
        """Decide whether this request is traced (level, rate, remaining count)."""
        if not self._any_on:  # tracing is off everywhere (the default): no lock, no lookups
            return None
        with self._lock:
            own = self._models.get(model, {})
            level = own.get("trace_level", self._global["trace_level"])
            if "TIMESTAMPS" not in level:
                return None
            seen = self._seen.get(model, 0) + 1
            self._seen[model] = seen
            rate = int(own.get("trace_rate", self._global["trace_rate"])[0])
            if (seen - 1) % rate:
                return None
            holder = own if "trace_count" in own else self._global
            count = int(holder["trace_count"][0])
            if count == 0:
                return None
            if count > 0:
                holder["trace_count"] = [str(count - 1)]
        return TraceHandle(model, request_id, time.time_ns(), Timeline())

    def finish(self, handle: TraceHandle, version: str, error: str = "") -> None:
        """Record the request's span tree from its timeline."""
        end_ns = time.time_ns()
        attributes = {
            "triton.model_name": handle.model,
            "triton.model_version": version,
            "triton.request_id": handle.request_id,
        }
        root = self.tracer.start_span("InferRequest", start_time=handle.start_ns, attributes=attributes)
        root.add_event("REQUEST_START", timestamp=handle.start_ns)
        t = handle.timeline
        context = set_span_in_context(root)
        stages = (
            ("queue", "QUEUE_START", t.queue_start, t.compute_start),
            ("compute_input", "COMPUTE_START", t.compute_start, t.compute_input_end),
            ("infer", "COMPUTE_INPUT_END", t.compute_input_end, t.compute_output_start),
            ("compute_output", "COMPUTE_OUTPUT_START", t.compute_output_start, t.compute_end),
        )
        for name, event, begin, finish in stages:
            if not begin:
                continue
            root.add_event(event, timestamp=begin + EPOCH_OFFSET_NS)
            if finish:
                span = self.tracer.start_span(name, context=context, start_time=begin + EPOCH_OFFSET_NS)
                span.end(end_time=finish + EPOCH_OFFSET_NS)
        if t.compute_end:
            root.add_event("COMPUTE_END", timestamp=t.compute_end + EPOCH_OFFSET_NS)
        if error:
            root.set_attribute("error", True)
            root.set_attribute("error.message", error)
        root.add_event("REQUEST_END", timestamp=end_ns)
        root.end(end_time=end_ns)

    def shutdown(self) -> None:
        self.provider.shutdown()


def _check(key: str, values: Any, tracing: RequestTracing, model: str) -> list[str] | None:
    """One setting change as a list of strings, or None for a reset; InvalidArgument if bad."""
    if values is None or values == []:
        return None
    if isinstance(values, (str, int)) and not isinstance(values, bool):
        values = [str(values)]
    if not isinstance(values, list) or not all(isinstance(v, (str, int)) for v in values):
        raise InvalidArgument(f"trace setting '{key}' must be a string or a list of strings, got {values!r}")
    values = [str(v) for v in values]
    if key in READ_ONLY:
        current = tracing.settings(model)[key]
        if values != [str(current)]:
            raise InvalidArgument(f"trace setting '{key}' can not be updated through network protocol")
        return values
    if key not in DEFAULTS:
        raise InvalidArgument(
            f"unknown trace setting '{key}'; known: {', '.join([*DEFAULTS, 'trace_file', 'trace_mode'])}"
        )
    if key == "trace_level":
        for level in values:
            if level not in LEVELS:
                raise InvalidArgument(f"trace_level '{level}' is not one of {', '.join(LEVELS)}")
            if level == "TENSORS":
                raise InvalidArgument(
                    "trace_level TENSORS (tensor contents in traces) is not supported; use TIMESTAMPS"
                )
        return values
    if len(values) != 1:
        raise InvalidArgument(f"trace setting '{key}' takes one value, got {values}")
    try:
        number = int(values[0])
    except ValueError:
        raise InvalidArgument(f"trace setting '{key}' must be an integer, got '{values[0]}'") from None
    lowest = -1 if key == "trace_count" else 1
    if number < lowest:
        raise InvalidArgument(f"trace setting '{key}' must be >= {lowest}, got {number}")
    return [str(number)]


# --- the front doors ------------------------------------------------------------------------------


def trace_router(tracing: RequestTracing, known_model: Callable[[str], object]) -> APIRouter:
    """``GET/POST /v2/trace/setting`` and ``/v2/models/{m}/trace/setting``; ``known_model`` raises
    Triton's unknown-model error for a model that is not loaded."""
    router = APIRouter()

    @router.get("/v2/trace/setting")
    async def get_trace_settings() -> Response:
        return json_response(tracing.settings())

    @router.post("/v2/trace/setting")
    async def update_trace_settings(request: Request) -> Response:
        return json_response(tracing.update(await json_object(request)))

    @router.get("/v2/models/{model}/trace/setting")
    async def get_model_trace_settings(model: str) -> Response:
        known_model(model)
        return json_response(tracing.settings(model))

    @router.post("/v2/models/{model}/trace/setting")
    async def update_model_trace_settings(model: str, request: Request) -> Response:
        known_model(model)
        return json_response(tracing.update(await json_object(request), model))

    return router


def grpc_trace_setting(
    tracing: RequestTracing, known_model: Callable[[str], object], request: pb.TraceSettingRequest
) -> pb.TraceSettingResponse:
    """The gRPC form: every setting is a list of strings; an empty list resets it."""
    if request.model_name:
        known_model(request.model_name)
    changes = {key: list(value.value) for key, value in request.settings.items()}
    current = tracing.update(changes, request.model_name) if changes else tracing.settings(request.model_name)
    response = pb.TraceSettingResponse()
    for key, value in current.items():
        response.settings[key].value.extend(value if isinstance(value, list) else [str(value)])
    return response
