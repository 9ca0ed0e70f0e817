"""Tensor codec shared by the Ferry server and clients: V2 JSON, binary extension and protobuf."""

from .datatypes import (
    DATATYPES,
    bf16_to_float32,
    check_datatype,
    config_type_from_datatype,
    datatype_from_config,
    float32_to_bf16,
    item_size,
    numpy_dtype,
    v2_datatype,
)
from .errors import CodecError
from .http_body import HEADER_LENGTH, dumps, join_body, loads_json, read_tensors, split_body, write_tensor
from .tensors import (
    CONTENTS_FIELD,
    decode_bytes_elements,
    element_count,
    encode_bytes_elements,
    tensor_from_bytes,
    tensor_from_contents,
    tensor_from_json,
    tensor_from_proto,
    tensor_to_bytes,
    tensor_to_contents,
    tensor_to_json,
)

__all__ = [
    "CONTENTS_FIELD",
    "DATATYPES",
    "HEADER_LENGTH",
    "CodecError",
    "bf16_to_float32",
    "check_datatype",
    "config_type_from_datatype",
    "datatype_from_config",
    "decode_bytes_elements",
    "dumps",
    "element_count",
    "encode_bytes_elements",
    "float32_to_bf16",
    "item_size",
    "join_body",
    "loads_json",
    "numpy_dtype",
    "read_tensors",
    "split_body",
    "tensor_from_bytes",
    "tensor_from_contents",
    "tensor_from_json",
    "tensor_from_proto",
    "tensor_to_bytes",
    "tensor_to_contents",
    "tensor_to_json",
    "v2_datatype",
    "write_tensor",
]
