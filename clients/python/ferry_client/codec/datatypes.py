"""KServe V2 datatype names and their numpy counterparts.

One table serves the JSON, binary and protobuf codecs on both sides of the wire, so a datatype
can never mean one thing to the client and another to the server.
"""

from __future__ import annotations

import numpy as np

from .errors import CodecError

#: V2 datatype -> numpy dtype used to hold it. BYTES lives in object arrays of ``bytes``;
#: BF16 has no numpy dtype, so it travels as its raw 16-bit patterns in ``uint16`` arrays.
_NUMPY_BY_DATATYPE: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": np.dtype(np.uint16),
}

DATATYPES: tuple[str, ...] = tuple(_NUMPY_BY_DATATYPE)

_DATATYPE_BY_NUMPY: dict[np.dtype, str] = {
    dtype: name for name, dtype in _NUMPY_BY_DATATYPE.items() if name not in ("BF16",)
}

#: Bytes per element on the wire (BYTES is variable).
_ITEM_SIZE: dict[str, int] = {name: dtype.itemsize for name, dtype in _NUMPY_BY_DATATYPE.items() if name != "BYTES"}

#: Triton's config DataType enum names (TYPE_FP32, ...) -> V2 datatype.
_DATATYPE_BY_CONFIG_TYPE: dict[str, str] = {
    "TYPE_BOOL": "BOOL",
    "TYPE_UINT8": "UINT8",
    "TYPE_UINT16": "UINT16",
    "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64",
    "TYPE_INT8": "INT8",
    "TYPE_INT16": "INT16",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
    "TYPE_FP16": "FP16",
    "TYPE_FP32": "FP32",
    "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
    "TYPE_BF16": "BF16",
}
_CONFIG_TYPE_BY_DATATYPE = {v: k for k, v in _DATATYPE_BY_CONFIG_TYPE.items()}


def check_datatype(datatype: str) -> str:
    """Return ``datatype`` if it is a V2 datatype name, else raise a CodecError naming the valid ones."""
    if datatype not in _NUMPY_BY_DATATYPE:
        raise CodecError(f"unsupported datatype '{datatype}'; expected one of {', '.join(DATATYPES)}")
    return datatype


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype that holds a V2 datatype (object for BYTES, uint16 bit patterns for BF16)."""
    return _NUMPY_BY_DATATYPE[check_datatype(datatype)]


def v2_datatype(dtype: np.dtype | type) -> str:
    """The V2 datatype for a numpy dtype; strings and bytes become BYTES."""
    dtype = np.dtype(dtype)
    if dtype.kind in ("U", "S", "O"):
        return "BYTES"
    try:
        return _DATATYPE_BY_NUMPY[dtype.newbyteorder("=")]
    except KeyError:
        raise CodecError(f"numpy dtype {dtype} has no KServe V2 datatype") from None


def item_size(datatype: str) -> int | None:
    """Bytes per element on the wire, or None for the variable-length BYTES."""
    return _ITEM_SIZE.get(check_datatype(datatype))


def datatype_from_config(config_type: str) -> str:
    """Map a Triton config enum name such as ``TYPE_FP32`` to its V2 datatype (``FP32``)."""
    try:
        return _DATATYPE_BY_CONFIG_TYPE[config_type]
    except KeyError:
        raise CodecError(f"unsupported model config data type '{config_type}'") from None


def config_type_from_datatype(datatype: str) -> str:
    """Map a V2 datatype (``FP32``) to Triton's config enum name (``TYPE_FP32``)."""
    return _CONFIG_TYPE_BY_DATATYPE[check_datatype(datatype)]


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float values to bfloat16 (nearest even) and return the 16-bit patterns as uint16."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = np.where(np.isnan(values), bits | np.uint32(0x00400000), bits + rounding)
    return (rounded >> 16).astype(np.uint16)


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 values, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
