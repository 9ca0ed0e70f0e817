"""Protobuf messages as the REST API's JSON: one conversion shared by the server and the clients."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format
from google.protobuf.message import Message

if TYPE_CHECKING:
    from google._upb import _message as _upb

    # protobuf's pure-Python and upb (C) implementations describe messages with different classes.
    Descriptor: TypeAlias = _descriptor.Descriptor | _upb.Descriptor
    FieldDescriptor: TypeAlias = _descriptor.FieldDescriptor | _upb.FieldDescriptor

_INT64_TYPES = frozenset(
    {
        _descriptor.FieldDescriptor.TYPE_INT64,
        _descriptor.FieldDescriptor.TYPE_UINT64,
        _descriptor.FieldDescriptor.TYPE_SINT64,
        _descriptor.FieldDescriptor.TYPE_FIXED64,
        _descriptor.FieldDescriptor.TYPE_SFIXED64,
    }
)


def message_to_dict(message: Message) -> dict[str, Any]:
    """A message as REST-style JSON: proto field names, defaults included, int64 as numbers.

    Protobuf's JSON mapping writes 64-bit integers as strings; the REST API writes numbers, and
    the two clients should hand back identical shapes.
    """
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _int64_as_numbers(message.DESCRIPTOR, data)
    return data


def _int64_as_numbers(desc: Descriptor, data: dict[str, Any]) -> None:
    for fd in desc.fields:
        if fd.name not in data:
            continue
        value = data[fd.name]
        entry = fd.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value_field = entry.fields_by_name["value"]
            for key in list(value):
                value[key] = _convert(value_field, value[key])
        elif isinstance(value, list):
            data[fd.name] = [_convert(fd, item) for item in value]
        else:
            data[fd.name] = _convert(fd, value)


def _convert(fd: FieldDescriptor, value: Any) -> Any:
    if fd.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    if fd.message_type is not None and isinstance(value, dict):
        _int64_as_numbers(fd.message_type, value)
    return value


def metadata_to_dict(response: Any) -> dict[str, Any]:
    """ModelMetadataResponse as REST's ``GET /v2/models/{m}`` body: ``parameters`` as plain values
    (``{"image_task": "detect"}``, not ``{"image_task": {"string_param": "detect"}}``), and absent when
    the model has none, so both clients return the same dict."""
    from .parameters import parameter_value

    data = message_to_dict(response)
    data.pop("parameters", None)
    if response.parameters:
        data["parameters"] = {key: parameter_value(value) for key, value in response.parameters.items()}
    return data
