"""``ferry serve --help`` shows each option's default and environment variable, taken from
``Settings`` itself, so the help text can never disagree with what the server does."""

from __future__ import annotations

import argparse
import enum

from pydantic_core import PydanticUndefined

from .settings import Settings

MIB = 1024 * 1024


def _shown(name: str, value: object) -> str:
    """A default as a user would type or read it (sizes in MiB, enums by value, no default as none)."""
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if name.endswith("_bytes") and isinstance(value, int) and value and value % MIB == 0:
        return f"{value // MIB} MiB"
    return str(value)


def describe_defaults(parser: argparse.ArgumentParser) -> None:
    """Append '(default: X; env FERRY_NAME)' to the help of every flag that sets a ``Settings`` field."""
    for action in parser._actions:
        field = Settings.model_fields.get(action.dest)
        if field is None:
            continue
        if field.default_factory is not None:
            default = field.default_factory()
        else:
            default = None if field.default is PydanticUndefined else field.default
        text = action.help or field.description or ""
        suffix = f"default: {_shown(action.dest, default)}; env FERRY_{action.dest.upper()}"
        action.help = f"{text} ({suffix})".replace("%", "%%") if text else f"({suffix})"
