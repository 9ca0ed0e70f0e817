"""Request/response parameters <-> protobuf ``InferParameter``: one mapping for client and server."""

from __future__ import annotations

from typing import Any

from .errors import CodecError


def set_parameter(parameter: Any, key: str, value: Any) -> None:
    """Store a Python value in the InferParameter field of its type (bool before int: bool is an int)."""
    try:
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            parameter.int64_param = value
        elif isinstance(value, float):
            parameter.double_param = value
        elif isinstance(value, str):
            parameter.string_param = value
        else:
            raise CodecError(f"parameter '{key}' must be a bool, int, float or str, got {type(value).__name__}")
    except ValueError as exc:
        raise CodecError(f"parameter '{key}': {exc}") from None


def parameter_value(parameter: Any) -> Any:
    """The Python value of an InferParameter / ModelRepositoryParameter, whichever field is set."""
    choice = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, choice) if choice else None
