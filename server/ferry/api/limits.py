"""Per-request limits checked before any tensor is decoded, so no request can make the server
allocate far more than it sent (a shape of a billion empty BYTES elements, a huge JSON array).

The body-size limit bounds the bytes on the wire; these bound what decoding may turn them into.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ferry_client.codec import CodecError, element_count

from ..errors import InvalidArgument, PayloadTooLarge

MIB = 1024 * 1024
#: Bodies, messages and responses from this size on are decompressed, parsed, decoded and encoded
#: on a worker thread, so one large request does not hold up every other connection.
OFF_LOOP_BYTES = 1 * MIB


@dataclass(frozen=True)
class Limits:
    max_tensor_elements: int = 1 << 26  # 64 Mi elements: 256 MiB as FP32, the default body limit
    max_bytes_elements: int = 1 << 20  # BYTES elements are Python objects (~40 bytes each)
    max_inputs: int = 128
    max_json_bytes: int = 64 * MIB  # JSON numbers cost ~30x their text once parsed
    #: elements of one batch item of an input whose config dims vary (-1): what a model's run on it
    #: holds grows with it (ONNX Runtime held 10-25 bytes a byte of input for PP-OCR's models)
    max_variable_elements: int = 0  # 0: none, unless the model's config sets one

    def check_tensor(self, name: str, datatype: str, shape: Sequence[int]) -> None:
        """Refuse a declared shape beyond the element limits, before decoding its data."""
        try:
            count = element_count(name, shape)
        except CodecError as exc:
            raise InvalidArgument(str(exc)) from None
        if datatype == "BYTES" and count > self.max_bytes_elements:
            raise PayloadTooLarge(
                f"tensor '{name}': {count} BYTES elements exceed the limit of {self.max_bytes_elements} per tensor"
            )
        if count > self.max_tensor_elements:
            raise PayloadTooLarge(
                f"tensor '{name}': {count} elements exceed the limit of {self.max_tensor_elements} per tensor"
            )

    def check_input_count(self, count: int) -> None:
        if count > self.max_inputs:
            raise InvalidArgument(f"request has {count} inputs; at most {self.max_inputs} are accepted")

    def check_json_size(self, size: int) -> None:
        if size > self.max_json_bytes:
            raise PayloadTooLarge(
                f"JSON part of {size} bytes exceeds the limit of {self.max_json_bytes} bytes; "
                "send large tensors with the binary tensor data extension"
            )
