"""Triton's logging extension (``GET/POST /v2/logging``, gRPC ``LogSettings``) on Python logging.

Triton's switches map onto Ferry's log records: ``log_info`` / ``log_warning`` / ``log_error`` let
each severity through, ``log_verbose_level`` > 0 adds DEBUG, and ``log_format`` picks the line
format (Triton's ``default`` and ``ISO8601``, plus ``json`` for one JSON object per line). The log
file is chosen at start-up only: a network caller must not make the server write files.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from ferry_client.protocol import grpc_service_pb2 as pb

from ..errors import InvalidArgument
from .json_body import json_object, json_response

FORMATS = ("default", "ISO8601", "json")
_DEFAULT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # Ferry's line format
_SEVERITY_SWITCH = {logging.INFO: "log_info", logging.WARNING: "log_warning", logging.ERROR: "log_error"}


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def formatter_for(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonLineFormatter()
    if log_format == "ISO8601":
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%SZ")
        formatter.converter = time.gmtime
        return formatter
    return logging.Formatter(_DEFAULT_FORMAT)


@dataclass
class LogSettings:
    """The settings as Triton names them; ``log_file`` is reported, never changed by the API."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"


class _SeverityFilter(logging.Filter):
    """Drops records whose severity is switched off (Triton's switches are independent)."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO:
            return self.settings.log_verbose_level > 0
        level = max(lvl for lvl in _SEVERITY_SWITCH if lvl <= record.levelno)
        return getattr(self.settings, _SEVERITY_SWITCH[level])


class LoggingControl:
    """Owns the server's log handlers and applies setting changes to them at once."""

    def __init__(self, settings: LogSettings, root: logging.Logger | None = None) -> None:
        self.settings = settings
        self.root = root or logging.getLogger()
        self._filter = _SeverityFilter(settings)
        self._apply()

    @classmethod
    def from_level(
        cls, level: str, log_format: str = "default", log_file: str = "", root: logging.Logger | None = None
    ) -> LoggingControl:
        """Start from Ferry's ``--log-level`` (debug | info | warning | error) and ``--log-format``."""
        chosen = level.lower()
        settings = LogSettings(
            log_file=log_file,
            log_info=chosen in ("debug", "info"),
            log_warning=chosen != "error",
            log_verbose_level=1 if chosen == "debug" else 0,
            log_format=_checked_format(log_format),
        )
        return cls(settings, root)

    def get(self) -> dict[str, Any]:
        return asdict(self.settings)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply ``changes`` (all checked first, so a bad one changes nothing); returns the result."""
        known = {f.name: f.type for f in fields(LogSettings)}
        checked: dict[str, Any] = {}
        for key, value in changes.items():
            if key not in known:
                raise InvalidArgument(f"unknown log setting '{key}'; known: {', '.join(known)}")
            if key == "log_file":
                if value != self.settings.log_file:
                    raise InvalidArgument("log file location can not be updated through network protocol")
            elif key == "log_format":
                checked[key] = _checked_format(value)
            elif key == "log_verbose_level":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidArgument(
                        f"log setting 'log_verbose_level' must be a non-negative integer, got {value!r}"
                    )
                checked[key] = value
            elif not isinstance(value, bool):
                raise InvalidArgument(f"log setting '{key}' must be true or false, got {value!r}")
            else:
                checked[key] = value
        for key, value in checked.items():
            setattr(self.settings, key, value)
        self._apply()
        return self.get()

    def _apply(self) -> None:
        """Point every root handler at the current format and severities."""
        if not self.root.handlers:
            self.root.addHandler(self._new_handler())
        formatter = formatter_for(self.settings.log_format)
        for handler in self.root.handlers:
            handler.setFormatter(formatter)
            if self._filter not in handler.filters:
                handler.addFilter(self._filter)
        self.root.setLevel(logging.DEBUG if self.settings.log_verbose_level > 0 else logging.INFO)

    def _new_handler(self) -> logging.Handler:
        if self.settings.log_file:
            return logging.FileHandler(self.settings.log_file, encoding="utf-8")
        return logging.StreamHandler()


def _checked_format(value: Any) -> str:
    if value not in FORMATS:
        raise InvalidArgument(f"log setting 'log_format' must be one of {', '.join(FORMATS)}, got {value!r}")
    return value


# --- the front doors ------------------------------------------------------------------------------


def log_router(control: LoggingControl) -> APIRouter:
    """``GET /v2/logging`` reports the settings; ``POST`` changes those it names."""
    router = APIRouter()

    @router.get("/v2/logging")
    async def get_log_settings() -> Response:
        return json_response(control.get())

    @router.post("/v2/logging")
    async def update_log_settings(request: Request) -> Response:
        return json_response(control.update(await json_object(request)))

    return router


def grpc_log_settings(control: LoggingControl, request: pb.LogSettingsRequest) -> pb.LogSettingsResponse:
    """The gRPC form: each setting is a bool, uint32 or string parameter (none set: unchanged)."""
    changes = {
        key: getattr(value, choice)
        for key, value in request.settings.items()
        if (choice := value.WhichOneof("parameter_choice"))
    }
    response = pb.LogSettingsResponse()
    for key, value in (control.update(changes) if changes else control.get()).items():
        setting = response.settings[key]
        if isinstance(value, bool):
            setting.bool_param = value
        elif isinstance(value, int):
            setting.uint32_param = value
        else:
            setting.string_param = value
    return response
