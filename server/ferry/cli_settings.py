"""``ferry serve``'s flags, built from the fields of ``Settings``: one flag per field, its help the
field's description plus the default and the environment variable, its parsing and choices from the
field's type. Nothing here names an option, so a new setting is a flag the moment it is a field."""

from __future__ import annotations

import argparse
import enum
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .settings import FLAG_GROUPS, Flag, Settings

MIB = 1024 * 1024


def flag_of(field: FieldInfo) -> Flag:
    """The field's command-line extras (a plain ``Flag()`` when it has none)."""
    return next((m for m in field.metadata if isinstance(m, Flag)), Flag())


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    return "FERRY_" + name.upper()


def cli_fields() -> Iterator[tuple[str, FieldInfo, Flag]]:
    """Every setting that has a flag (all but the environment-only ones), in declaration order."""
    for name, field in Settings.model_fields.items():
        flag = flag_of(field)
        if not flag.env_only:
            yield name, field, flag


def default_of(field: FieldInfo) -> object:
    default = field.get_default(call_default_factory=True, validated_data={})
    return None if default is PydanticUndefined else default


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


def _without_none(annotation: Any) -> Any:
    """``X | None`` -> ``X`` (an optional setting's flag takes an X; leaving it out means None)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _parsing(annotation: Any) -> dict[str, Any]:
    """argparse keywords that read a value of this type (pydantic checks ranges afterwards)."""
    kind = _without_none(annotation)
    origin = typing.get_origin(kind)
    if kind is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is list:
        (item,) = typing.get_args(kind)
        return {"action": "append", **_parsing(item)}
    if origin is typing.Literal:
        choices = list(typing.get_args(kind))
        return {"choices": choices, "type": type(choices[0])}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {"choices": [member.value for member in kind]}
    if kind in (int, float, Path):
        return {"type": kind}
    if kind is str:
        return {}
    raise TypeError(f"no command-line parsing for settings of type {kind!r}")


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, under the field's heading; every default is None, so only the flags
    given on the command line override the environment and the field defaults."""
    groups = {title: parser.add_argument_group(title, text) for title, text in FLAG_GROUPS.items()}
    environment_only = [
        f"{env_name(name)}: {field.description} (no flag: {flag_of(field).env_only})"
        for name, field in Settings.model_fields.items()
        if flag_of(field).env_only
    ]
    if environment_only:
        parser.epilog = "Environment only: " + "; ".join(environment_only).replace("%", "%%")
    for name, field, flag in cli_fields():
        help_text = f"{field.description or ''} (default: {_shown(name, default_of(field))}; env {env_name(name)})"
        target = groups[flag.group] if flag.group else parser
        target.add_argument(
            flag_name(name),
            *flag.aliases,
            dest=name,
            default=None,
            metavar=flag.metavar,
            help=help_text.strip().replace("%", "%%"),
            **_parsing(field.annotation),
        )


def flag_options(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (a setting whose flag was left out is absent, not None)."""
    return {name: value for name, _, _ in cli_fields() if (value := getattr(args, name, None)) is not None}
