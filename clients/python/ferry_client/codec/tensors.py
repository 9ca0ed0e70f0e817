"""Tensor codecs: numpy arrays to and from V2 JSON data, raw little-endian bytes and protobuf contents.

Decoders check that the data agrees with the declared shape and datatype and name the tensor in
every error, because these messages go straight back to whoever sent the request.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .datatypes import bf16_to_float32, float32_to_bf16, item_size, numpy_dtype
from .errors import CodecError

_LENGTH_PREFIX = struct.Struct("<I")

#: Largest product of dimensions numpy can shape an array to at 8 bytes per element.
_MAX_SPAN = 2**60


def element_count(name: str, shape: Sequence[int]) -> int:
    """Number of elements a shape holds; every dimension must be a non-negative integer."""
    if not isinstance(shape, (list, tuple)):
        raise CodecError(f"tensor '{name}': shape must be a list of integers, got {shape!r}")
    count = 1
    span = 1  # the product numpy checks even when a zero dimension makes the tensor empty
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise CodecError(f"tensor '{name}': shape {list(shape)} must hold non-negative integers")
        count *= int(dim)
        span *= max(int(dim), 1)
    if span > _MAX_SPAN:
        raise CodecError(f"tensor '{name}': shape {list(shape)} is too large")
    return count


# --- BYTES -----------------------------------------------------------------------------------


def encode_bytes_elements(array: np.ndarray) -> bytes:
    """Serialise a BYTES tensor: each element as a 4-byte little-endian length and its bytes."""
    parts: list[bytes] = []
    for item in np.asarray(array, dtype=object).reshape(-1):
        data = _as_bytes(item)
        parts.append(_LENGTH_PREFIX.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytearray, memoryview, np.bytes_)):
        return bytes(item)
    return str(item).encode("utf-8")


def decode_bytes_elements(name: str, buffer: bytes | memoryview, count: int) -> np.ndarray:
    """Parse ``count`` length-prefixed elements that must fill ``buffer`` exactly."""
    view = memoryview(buffer)
    total = len(view)
    if count * 4 > total:  # checked before allocating: a huge declared shape must not exhaust memory
        raise CodecError(
            f"tensor '{name}': {count} BYTES elements need at least {count * 4} bytes of length prefixes "
            f"but the data holds {total}"
        )
    out = np.empty(count, dtype=object)
    offset = 0
    for index in range(count):
        if offset + 4 > total:
            raise CodecError(
                f"tensor '{name}': BYTES data ends after {index} of {count} elements "
                f"(no room for the 4-byte length of element {index})"
            )
        (length,) = _LENGTH_PREFIX.unpack_from(view, offset)
        offset += 4
        if offset + length > total:
            raise CodecError(
                f"tensor '{name}': BYTES element {index} declares {length} bytes but only {total - offset} remain"
            )
        out[index] = bytes(view[offset : offset + length])
        offset += length
    if offset != total:
        raise CodecError(f"tensor '{name}': {total - offset} bytes left over after {count} BYTES elements")
    return out


# --- raw little-endian bytes (binary extension, raw_input_contents) ----------------------------


def tensor_from_bytes(name: str, datatype: str, shape: Sequence[int], buffer: bytes | memoryview) -> np.ndarray:
    """Decode raw tensor bytes without copying fixed-size types (``np.frombuffer``)."""
    count = element_count(name, shape)
    size = item_size(datatype)
    if size is None:
        return decode_bytes_elements(name, buffer, count).reshape(shape)
    expected = count * size
    if len(buffer) != expected:
        raise CodecError(
            f"tensor '{name}': expected {expected} bytes for {datatype} shape {list(shape)}, got {len(buffer)}"
        )
    dtype = numpy_dtype(datatype).newbyteorder("<")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def tensor_to_bytes(array: np.ndarray, datatype: str) -> bytes | memoryview:
    """Encode a tensor as raw little-endian bytes (a zero-copy view when it already is one)."""
    if datatype == "BYTES":
        return encode_bytes_elements(array)
    dtype = numpy_dtype(datatype).newbyteorder("<")
    if datatype == "BF16" and not (array.dtype.kind == "u" and array.dtype.itemsize == 2):  # not yet bit patterns
        array = float32_to_bf16(np.asarray(array, dtype=np.float32))
    contiguous = np.ascontiguousarray(array, dtype=dtype)
    # A flat uint8 view (its buffer, ``.data``), because memoryview.cast refuses zero-size shapes.
    return contiguous.reshape(-1).view(np.uint8).data


# --- JSON data -----------------------------------------------------------------------------


def _flatten(data: Any) -> list[Any]:
    """Flatten nested JSON lists (V2 allows both flat and nested row-major data)."""
    if not isinstance(data, list):
        return [data]
    if not any(isinstance(item, list) for item in data):
        return data
    flat: list[Any] = []
    stack: list[Iterable[Any]] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def tensor_from_json(name: str, datatype: str, shape: Sequence[int], data: Any) -> np.ndarray:
    """Decode the ``data`` member of a V2 JSON tensor, checking element count and value types."""
    count = element_count(name, shape)
    flat = _flatten(data)
    if len(flat) != count:
        raise CodecError(f"tensor '{name}': shape {list(shape)} needs {count} elements but data holds {len(flat)}")
    if datatype == "BYTES":
        out = np.empty(count, dtype=object)
        for index, item in enumerate(flat):
            if not isinstance(item, str):
                raise CodecError(f"tensor '{name}': BYTES data must be strings, element {index} is {item!r}")
            out[index] = item.encode("utf-8")
        return out.reshape(shape)
    _check_json_values(name, datatype, flat)
    try:
        if datatype == "BF16":
            return float32_to_bf16(np.asarray(flat, dtype=np.float32)).reshape(shape)
        return np.asarray(flat, dtype=numpy_dtype(datatype)).reshape(shape)
    except (OverflowError, ValueError, TypeError) as exc:
        raise CodecError(f"tensor '{name}': data does not fit {datatype}: {exc}") from None


def _check_json_values(name: str, datatype: str, flat: list[Any]) -> None:
    if datatype == "BOOL":
        wanted: tuple[type, ...] = (bool,)
        what = "true/false"
    elif datatype.startswith(("INT", "UINT")):
        wanted = (int,)
        what = "integers"
    else:
        # null stands for NaN / infinity, which JSON cannot spell (tensor_to_json writes it).
        wanted = (int, float, type(None))
        what = "numbers or null"
    for index, item in enumerate(flat):
        if not isinstance(item, wanted) or (datatype != "BOOL" and isinstance(item, bool)):
            raise CodecError(f"tensor '{name}': {datatype} data must be {what}, element {index} is {item!r}")


def tensor_to_json(array: np.ndarray, datatype: str) -> list[Any]:
    """Encode a tensor as the flat row-major ``data`` list of a V2 JSON tensor."""
    if datatype == "BYTES":
        out = []
        for item in np.asarray(array, dtype=object).reshape(-1):
            data = _as_bytes(item)
            try:
                out.append(data.decode("utf-8"))
            except UnicodeDecodeError:
                raise CodecError(
                    "a BYTES element is not valid UTF-8 and cannot be sent as JSON; request the output with binary_data"
                ) from None
        return out
    if datatype == "BF16":
        array = bf16_to_float32(array)
    flat = np.asarray(array).reshape(-1)
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        # Standard JSON has no NaN or infinity, so they travel as null (and return as NaN). Triton
        # writes the non-standard literals NaN/Infinity instead; binary_data carries both exactly.
        return [value if math.isfinite(value) else None for value in flat.tolist()]
    return flat.tolist()


# --- protobuf InferTensorContents -------------------------------------------------------------

#: V2 datatype -> InferTensorContents field that carries it.
CONTENTS_FIELD: dict[str, str] = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


#: Typed contents are copied into numpy this many elements at a time.
CONTENTS_SLICE = 1 << 18


def tensor_from_contents(name: str, datatype: str, shape: Sequence[int], contents: Any) -> np.ndarray:
    """Decode a typed ``InferTensorContents`` message (FP16 and BF16 have no typed field)."""
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise CodecError(f"tensor '{name}': {datatype} cannot be sent in typed contents; use raw_input_contents")
    values = getattr(contents, field)
    count = element_count(name, shape)
    if len(values) != count:
        raise CodecError(f"tensor '{name}': shape {list(shape)} needs {count} elements but {field} holds {len(values)}")
    if datatype == "BYTES":
        out = np.empty(count, dtype=object)
        out[:] = list(values)
        return out.reshape(shape)
    if datatype in FIXED_WIDTH_CONTENTS:
        packed = _packed_field(contents, field, FIXED_WIDTH_CONTENTS[datatype], count)
        if packed is not None:
            return packed.reshape(shape)
    out = np.empty(count, dtype=numpy_dtype(datatype))
    elements = iter(values)
    try:
        # straight from the repeated field: no Python list of the values (~32 bytes a number) is
        # built; in slices, so a server decoding on a worker thread gives the GIL back between them
        for start in range(0, count, CONTENTS_SLICE):
            size = min(CONTENTS_SLICE, count - start)
            out[start : start + size] = np.fromiter(elements, dtype=out.dtype, count=size)
    except (OverflowError, ValueError) as exc:
        raise CodecError(f"tensor '{name}': data does not fit {datatype}: {exc}") from None
    return out.reshape(shape)


#: Typed fields whose wire form is the little-endian values themselves (fixed32 / fixed64).
FIXED_WIDTH_CONTENTS: dict[str, np.dtype[Any]] = {"FP32": np.dtype("<f4"), "FP64": np.dtype("<f8")}


def _packed_field(contents: Any, field: str, dtype: np.dtype[Any], count: int) -> np.ndarray | None:
    """The values of fixed-width ``field`` as an array over the message's serialised bytes, or None
    when they are not found there in one packed run.

    Why: copying a repeated field into numpy goes element by element with the GIL held (about half
    a second for 30 MiB of FP32, with every other request waiting), while the protobuf runtime
    serialises the message at memory speed, writing proto3 repeated scalars packed however the
    client sent them: the field's payload is then exactly the little-endian values."""
    number = contents.DESCRIPTOR.fields_by_name[field].number
    wire = contents.SerializeToString()
    position = 0
    while position < len(wire):
        key, position = _varint(wire, position)
        kind = key & 7
        if kind == 2:  # length-delimited: a packed field, or another message's bytes
            length, position = _varint(wire, position)
            if key >> 3 == number:
                if length != count * dtype.itemsize:
                    return None
                return np.frombuffer(wire, dtype=dtype, count=count, offset=position)
            position += length
        elif kind == 0:
            _, position = _varint(wire, position)
        elif kind == 1:
            position += 8
        elif kind == 5:
            position += 4
        else:
            return None
    return None if count else np.empty(0, dtype=dtype)


def _varint(data: bytes, position: int) -> tuple[int, int]:
    """The base-128 varint at ``position`` and the position after it."""
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def tensor_to_contents(array: np.ndarray, datatype: str, contents: Any) -> None:
    """Fill a typed ``InferTensorContents`` message from a tensor."""
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise CodecError(f"{datatype} cannot be sent in typed contents; use raw contents")
    flat = np.asarray(array).reshape(-1)
    if datatype == "BYTES":
        getattr(contents, field).extend(_as_bytes(item) for item in flat)
    else:
        getattr(contents, field).extend(flat.tolist())


def tensor_from_proto(tensor: Any, raw_contents: Sequence[bytes | memoryview], index: int) -> np.ndarray:
    """Decode the ``index``-th tensor of a ModelInferRequest/Response: from its raw contents when the
    message carries them (zero-copy), else from the tensor's typed ``contents``."""
    shape = list(tensor.shape)
    if raw_contents:
        return tensor_from_bytes(tensor.name, tensor.datatype, shape, raw_contents[index])
    return tensor_from_contents(tensor.name, tensor.datatype, shape, tensor.contents)
