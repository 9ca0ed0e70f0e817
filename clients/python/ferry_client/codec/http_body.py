"""The HTTP body of the V2 binary tensor data extension: a JSON header followed by raw tensors.

``Inference-Header-Content-Length`` tells where the JSON ends; every tensor whose parameters carry
``binary_data_size`` takes that many bytes from the rest of the body, in the order listed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import CodecError
from .tensors import tensor_from_bytes, tensor_from_json, tensor_to_bytes, tensor_to_json

HEADER_LENGTH = "Inference-Header-Content-Length"

try:  # orjson is several times faster for the JSON header; the stdlib is the fallback.
    import orjson

    def _loads(data: bytes | memoryview) -> Any:
        return orjson.loads(data)

    def dumps(obj: Any) -> bytes:
        """Serialise a JSON header (orjson when installed)."""
        return orjson.dumps(obj)

    _JSON_ERRORS: tuple[type[Exception], ...] = (orjson.JSONDecodeError,)
except ImportError:  # pragma: no cover - depends on the environment

    def _loads(data: bytes | memoryview) -> Any:
        return json.loads(bytes(data))

    def dumps(obj: Any) -> bytes:
        """Serialise a JSON header (orjson when installed)."""
        return json.dumps(obj, separators=(",", ":")).encode("utf-8")

    _JSON_ERRORS = (json.JSONDecodeError, UnicodeDecodeError)


def loads_json(data: bytes | memoryview, what: str = "request body") -> Any:
    """Parse JSON, turning any syntax error into a CodecError that says where it is."""
    try:
        return _loads(data)
    except _JSON_ERRORS as exc:
        raise CodecError(f"malformed JSON in {what}: {exc}") from None
    except RecursionError:
        raise CodecError(f"JSON in {what} is nested too deeply") from None


def split_body(
    body: bytes | memoryview, header_length: int | str | None, what: str = "request body"
) -> tuple[dict[str, Any], memoryview]:
    """Split a body into its parsed JSON header and the binary remainder (``what`` names it in errors)."""
    view = memoryview(body)
    if header_length is None or header_length == "":
        return _expect_object(loads_json(view, what), what), view[len(view) :]
    try:
        length = int(header_length)
    except (TypeError, ValueError):
        raise CodecError(f"{HEADER_LENGTH} must be an integer, got {header_length!r}") from None
    if length < 0 or length > len(view):
        raise CodecError(f"{HEADER_LENGTH} is {length} but the body holds only {len(view)} bytes")
    return _expect_object(loads_json(view[:length], what), what), view[length:]


def _expect_object(parsed: Any, what: str) -> dict[str, Any]:
    if not isinstance(parsed, dict):
        raise CodecError(f"{what} must be a JSON object, got {type(parsed).__name__}")
    return parsed


def read_tensors(entries: Any, blob: memoryview, kind: str = "inputs") -> list[tuple[dict[str, Any], np.ndarray]]:
    """Decode the tensors of a V2 JSON message, taking binary ones from ``blob`` in order.

    Returns each entry with its array. Raises CodecError naming the tensor for any mismatch, and
    when the binary section is not used up exactly.
    """
    if not isinstance(entries, list):
        raise CodecError(f"'{kind}' must be a list of tensors")
    decoded: list[tuple[dict[str, Any], np.ndarray]] = []
    offset = 0
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise CodecError(f"{kind}[{position}] must be a JSON object")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise CodecError(f"{kind}[{position}] has no 'name'")
        datatype = entry.get("datatype")
        if not isinstance(datatype, str):
            raise CodecError(f"tensor '{name}' has no 'datatype'")
        shape = entry.get("shape")
        if shape is None:
            raise CodecError(f"tensor '{name}' has no 'shape'")
        parameters = entry.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise CodecError(f"tensor '{name}': 'parameters' must be a JSON object")
        size = parameters.get("binary_data_size")
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise CodecError(f"tensor '{name}': binary_data_size must be a non-negative integer")
            if offset + size > len(blob):
                raise CodecError(
                    f"tensor '{name}': binary_data_size {size} runs past the end of the body "
                    f"({len(blob) - offset} bytes remain)"
                )
            array = tensor_from_bytes(name, datatype, shape, blob[offset : offset + size])
            offset += size
        elif "data" in entry:
            array = tensor_from_json(name, datatype, shape, entry["data"])
        else:
            raise CodecError(f"tensor '{name}' has neither 'data' nor a binary_data_size parameter")
        decoded.append((entry, array))
    if offset != len(blob):
        raise CodecError(f"{len(blob) - offset} bytes of binary data follow the tensors and belong to none")
    return decoded


def write_tensor(
    name: str,
    array: np.ndarray,
    datatype: str,
    binary: bool,
    blobs: list[bytes | memoryview],
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Describe one tensor for a V2 JSON message; binary data is appended to ``blobs``."""
    entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
    params = dict(parameters or {})
    if binary:
        raw = tensor_to_bytes(array, datatype)
        params["binary_data_size"] = len(raw) if not isinstance(raw, memoryview) else raw.nbytes
        blobs.append(raw)
    else:
        entry["data"] = tensor_to_json(array, datatype)
    if params:
        entry["parameters"] = params
    return entry


def join_body(header: dict[str, Any], blobs: Sequence[bytes | memoryview]) -> tuple[bytes, int | None]:
    """Serialise a header and its binary tensors; returns the body and the header length to send
    (None when there is no binary part, so plain JSON clients see plain JSON)."""
    head = dumps(header)
    if not blobs:
        return head, None
    return b"".join([head, *blobs]), len(head)
