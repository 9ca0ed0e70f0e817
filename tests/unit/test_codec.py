"""Tests for ferry_client.codec: every V2 datatype through JSON, raw bytes and protobuf contents.

Decoders face untrusted bytes on the server, so beyond round trips the tests pin down the exact
error messages and fuzz the decoders: anything malformed must end in a CodecError, never in a
different exception.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ferry_client.codec import (
    CONTENTS_FIELD,
    DATATYPES,
    HEADER_LENGTH,
    CodecError,
    bf16_to_float32,
    check_datatype,
    config_type_from_datatype,
    datatype_from_config,
    decode_bytes_elements,
    dumps,
    element_count,
    encode_bytes_elements,
    float32_to_bf16,
    item_size,
    join_body,
    loads_json,
    numpy_dtype,
    read_tensors,
    split_body,
    tensor_from_bytes,
    tensor_from_contents,
    tensor_from_json,
    tensor_to_bytes,
    tensor_to_contents,
    tensor_to_json,
    v2_datatype,
    write_tensor,
)
from ferry_client.protocol import grpc_service_pb2 as pb

FIXED_DATATYPES = [dt for dt in DATATYPES if dt != "BYTES"]

#: bfloat16-exact values: they survive float32 -> bf16 -> float32 unchanged.
BF16_EXACT = np.array([[0.0, 1.0, -2.5, 3.140625], [65280.0, -0.0078125, 0.5, 256.0]], np.float32)


def sample(datatype: str) -> np.ndarray:
    """A 2x4 tensor of the datatype with values that reach each type's edges."""
    if datatype == "BYTES":
        return np.array([[b"", b"a", "\u00e9t\u00e9".encode(), b"x" * 300], [b"0", b"\x00", b"tab\t", b"end"]], object)
    if datatype == "BOOL":
        return np.array([[True, False, True, True], [False, False, True, False]])
    if datatype == "BF16":
        return float32_to_bf16(BF16_EXACT)
    dtype = numpy_dtype(datatype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([[info.min, info.max, 0, 1], [2, info.max - 1, info.min + 1, 7]], dtype)
    info = np.finfo(dtype)
    return np.array([[info.min, info.max, 0.0, -0.0], [0.5, -1.25, info.tiny, info.eps]], dtype)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal shape, dtype and values (NaN equal to NaN for floats)."""
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if expected.dtype.kind == "f":
        np.testing.assert_array_equal(actual, expected)
    else:
        assert actual.tolist() == expected.tolist()


# --- datatype table -----------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", DATATYPES)
def test_datatype_table_is_consistent(datatype: str) -> None:
    assert check_datatype(datatype) == datatype
    assert datatype_from_config(config_type_from_datatype(datatype)) == datatype
    size = item_size(datatype)
    if datatype == "BYTES":
        assert size is None
    else:
        assert size == numpy_dtype(datatype).itemsize
    if datatype != "BF16":  # BF16 shares uint16 with UINT16, which wins
        assert v2_datatype(numpy_dtype(datatype)) == datatype


def test_v2_datatype_of_strings_and_foreign_byte_order() -> None:
    assert v2_datatype(np.array(["a"]).dtype) == "BYTES"
    assert v2_datatype(np.array([b"a"]).dtype) == "BYTES"
    assert v2_datatype(np.dtype(">f4")) == "FP32"
    assert v2_datatype(np.dtype(">i8")) == "INT64"
    with pytest.raises(CodecError, match="numpy dtype complex64 has no KServe V2 datatype"):
        v2_datatype(np.complex64)


def test_unknown_datatype_names_the_valid_ones() -> None:
    with pytest.raises(CodecError, match=r"unsupported datatype 'FP8'; expected one of BOOL, UINT8, .*BF16"):
        check_datatype("FP8")
    with pytest.raises(CodecError, match="unsupported model config data type 'TYPE_FP8'"):
        datatype_from_config("TYPE_FP8")


# --- JSON ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", DATATYPES)
def test_json_round_trip(datatype: str) -> None:
    array = sample(datatype)
    data = dumps({"data": tensor_to_json(array, datatype)})  # through real JSON text
    decoded = tensor_from_json("x", datatype, list(array.shape), loads_json(data)["data"])
    assert_same(decoded, array)


def test_bf16_json_carries_float_values() -> None:
    bits = float32_to_bf16(BF16_EXACT)
    assert tensor_to_json(bits, "BF16") == BF16_EXACT.reshape(-1).tolist()
    assert_same(tensor_from_json("x", "BF16", [2, 4], BF16_EXACT.tolist()), bits)


@pytest.mark.parametrize("datatype", ["FP16", "FP32", "FP64", "BF16"])
def test_json_non_finite_values_travel_as_null_and_come_back_as_nan(datatype: str) -> None:
    values = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    array = float32_to_bf16(values) if datatype == "BF16" else values.astype(numpy_dtype(datatype))
    data = tensor_to_json(array, datatype)
    assert data == [1.0, None, None, None]
    decoded = tensor_from_json("x", datatype, [4], loads_json(dumps(data)))
    floats = bf16_to_float32(decoded) if datatype == "BF16" else decoded
    assert floats[0] == 1.0
    assert np.isnan(floats[1:]).all()


def test_json_nested_lists_decode_row_major() -> None:
    nested = tensor_from_json("x", "INT32", [2, 3], [[1, 2, 3], [4, 5, 6]])
    flat = tensor_from_json("x", "INT32", [2, 3], [1, 2, 3, 4, 5, 6])
    assert_same(nested, flat)
    assert nested.tolist() == [[1, 2, 3], [4, 5, 6]]
    deep = tensor_from_json("x", "FP32", [2, 1, 2], [[[1.0, 2.0]], [[3.0, 4.0]]])
    assert deep.tolist() == [[[1.0, 2.0]], [[3.0, 4.0]]]
    strings = tensor_from_json("x", "BYTES", [2, 1], [["a"], ["b"]])
    assert strings.tolist() == [[b"a"], [b"b"]]


def test_json_scalar_and_empty_tensors() -> None:
    assert tensor_from_json("x", "INT64", [], 7).tolist() == 7
    assert tensor_from_json("x", "INT64", [1], [7]).tolist() == [7]
    empty = tensor_from_json("x", "FP32", [0, 3], [])
    assert empty.shape == (0, 3) and empty.dtype == np.float32
    assert tensor_to_json(np.zeros((0, 3), np.float32), "FP32") == []


def test_json_accepts_integers_for_floats() -> None:
    assert tensor_from_json("x", "FP32", [2], [1, 2.5]).tolist() == [1.0, 2.5]


@pytest.mark.parametrize(
    ("datatype", "shape", "data", "message"),
    [
        ("INT32", [2, 2], [1, 2, 3], "tensor 'x': shape [2, 2] needs 4 elements but data holds 3"),
        ("FP32", [1], [[1.0], [2.0]], "tensor 'x': shape [1] needs 1 elements but data holds 2"),
        ("INT32", [2], [1, "a"], "tensor 'x': INT32 data must be integers, element 1 is 'a'"),
        ("INT64", [1], [True], "tensor 'x': INT64 data must be integers, element 0 is True"),
        ("UINT8", [1], [1.0], "tensor 'x': UINT8 data must be integers, element 0 is 1.0"),
        ("FP32", [2], [1.0, False], "tensor 'x': FP32 data must be numbers or null, element 1 is False"),
        ("FP64", [1], ["1.0"], "tensor 'x': FP64 data must be numbers or null, element 0 is '1.0'"),
        ("BOOL", [2], [True, 1], "tensor 'x': BOOL data must be true/false, element 1 is 1"),
        ("BOOL", [1], [None], "tensor 'x': BOOL data must be true/false, element 0 is None"),
        ("BYTES", [2], ["a", 1], "tensor 'x': BYTES data must be strings, element 1 is 1"),
        ("INT32", [1], [{"a": 1}], "tensor 'x': INT32 data must be integers, element 0 is {'a': 1}"),
    ],
)
def test_json_decode_errors(datatype: str, shape: list[int], data: Any, message: str) -> None:
    with pytest.raises(CodecError, match=f"^{re.escape(message)}$"):
        tensor_from_json("x", datatype, shape, data)


@pytest.mark.parametrize(
    ("datatype", "value"),
    [("UINT8", 256), ("UINT8", -1), ("INT8", 128), ("INT64", 2**63), ("UINT64", -1), ("UINT64", 2**64)],
)
def test_json_out_of_range_integers(datatype: str, value: int) -> None:
    with pytest.raises(CodecError, match=f"^tensor 'x': data does not fit {datatype}: "):
        tensor_from_json("x", datatype, [1], [value])


def test_json_of_non_utf8_bytes_is_refused() -> None:
    with pytest.raises(CodecError, match="a BYTES element is not valid UTF-8 and cannot be sent as JSON"):
        tensor_to_json(np.array([b"\xff"], object), "BYTES")


# --- shapes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([-1, 2], "tensor 'x': shape [-1, 2] must hold non-negative integers"),
        ([1.5], "tensor 'x': shape [1.5] must hold non-negative integers"),
        ([2.0], "tensor 'x': shape [2.0] must hold non-negative integers"),
        ([True], "tensor 'x': shape [True] must hold non-negative integers"),
        (["2"], "tensor 'x': shape ['2'] must hold non-negative integers"),
        ("2", "tensor 'x': shape must be a list of integers, got '2'"),
        (None, "tensor 'x': shape must be a list of integers, got None"),
        ([0, 2**61], f"tensor 'x': shape [0, {2**61}] is too large"),
    ],
)
def test_bad_shapes(shape: Any, message: str) -> None:
    with pytest.raises(CodecError, match=f"^{re.escape(message)}$"):
        element_count("x", shape)
    with pytest.raises(CodecError, match=f"^{re.escape(message)}$"):
        tensor_from_bytes("x", "INT32", shape, b"")
    with pytest.raises(CodecError, match=f"^{re.escape(message)}$"):
        tensor_from_json("x", "INT32", shape, [])


def test_element_count_accepts_numpy_integers() -> None:
    assert element_count("x", (np.int64(2), np.int32(3))) == 6
    assert element_count("x", []) == 1
    assert element_count("x", [4, 0, 9]) == 0


# --- raw bytes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", DATATYPES)
def test_raw_bytes_round_trip(datatype: str) -> None:
    array = sample(datatype)
    raw = bytes(tensor_to_bytes(array, datatype))
    assert_same(tensor_from_bytes("x", datatype, list(array.shape), raw), array)


@pytest.mark.parametrize("datatype", FIXED_DATATYPES)
def test_raw_bytes_are_little_endian(datatype: str) -> None:
    array = sample(datatype)
    raw = bytes(tensor_to_bytes(array.astype(array.dtype.newbyteorder(">")), datatype))
    assert raw == array.astype(array.dtype.newbyteorder("<")).tobytes()


@pytest.mark.parametrize("datatype", DATATYPES)
@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), ()])
def test_raw_bytes_of_empty_and_scalar_tensors(datatype: str, shape: tuple[int, ...]) -> None:
    array = np.zeros(shape, numpy_dtype(datatype))
    if datatype == "BYTES":
        array[...] = b"s"
    raw = tensor_to_bytes(array, datatype)
    assert_same(tensor_from_bytes("x", datatype, list(shape), bytes(raw)), array)


def test_raw_bytes_of_non_contiguous_arrays() -> None:
    array = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    assert bytes(tensor_to_bytes(array, "INT32")) == np.ascontiguousarray(array).tobytes()


def test_float_values_sent_as_bf16_are_rounded() -> None:
    raw = tensor_to_bytes(np.array([1.0, 2.5], np.float32), "BF16")
    assert bytes(raw) == float32_to_bf16(np.array([1.0, 2.5], np.float32)).tobytes()


def test_raw_byte_count_mismatch() -> None:
    with pytest.raises(CodecError, match=r"^tensor 'x': expected 8 bytes for INT32 shape \[2\], got 7$"):
        tensor_from_bytes("x", "INT32", [2], b"\0" * 7)
    with pytest.raises(CodecError, match=r"^tensor 'x': expected 0 bytes for FP32 shape \[0\], got 1$"):
        tensor_from_bytes("x", "FP32", [0], b"\0")


@pytest.mark.parametrize(
    ("data", "count", "message"),
    [
        (b"\x0a\0\0\0ab", 1, "tensor 'x': BYTES element 0 declares 10 bytes but only 2 remain"),
        (b"\x01\0\0\0a\x05\0\0\0abcd", 2, "tensor 'x': BYTES element 1 declares 5 bytes but only 4 remain"),
        (
            b"\x03\0\0\0abc\x05\0",
            2,
            "tensor 'x': BYTES data ends after 1 of 2 elements (no room for the 4-byte length of element 1)",
        ),
        (b"\x01\0\0\0abcd", 1, "tensor 'x': 3 bytes left over after 1 BYTES elements"),
        (b"\0\0\0\0", 0, "tensor 'x': 4 bytes left over after 0 BYTES elements"),
        (b"\0\0\0\0", 2, "tensor 'x': 2 BYTES elements need at least 8 bytes of length prefixes but the data holds 4"),
        (
            b"",
            2**62,
            f"tensor 'x': {2**62} BYTES elements need at least {2**64} bytes of length prefixes but the data holds 0",
        ),
    ],
)
def test_bytes_elements_errors(data: bytes, count: int, message: str) -> None:
    with pytest.raises(CodecError, match=f"^{re.escape(message)}$"):
        decode_bytes_elements("x", data, count)


def test_bytes_elements_layout() -> None:
    encoded = encode_bytes_elements(np.array([b"ab", "\u00e9", b""], object))
    assert encoded == b"\x02\0\0\0ab\x02\0\0\0\xc3\xa9\0\0\0\0"
    assert decode_bytes_elements("x", encoded, 3).tolist() == [b"ab", "\u00e9".encode(), b""]


def test_huge_bytes_shape_in_a_body_is_refused_without_allocating() -> None:
    header = {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [2**40], "parameters": {"binary_data_size": 4}}]}
    with pytest.raises(CodecError, match="BYTES elements need at least"):
        read_tensors(header["inputs"], memoryview(b"\0\0\0\0"))


# --- protobuf typed contents ---------------------------------------------------------------------


@pytest.mark.parametrize("datatype", sorted(CONTENTS_FIELD))
def test_contents_round_trip(datatype: str) -> None:
    array = sample(datatype)
    contents = pb.InferTensorContents()
    tensor_to_contents(array, datatype, contents)
    assert len(getattr(contents, CONTENTS_FIELD[datatype])) == array.size
    parsed = pb.InferTensorContents.FromString(contents.SerializeToString())  # through the wire format
    assert_same(tensor_from_contents("x", datatype, list(array.shape), parsed), array)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_contents_have_no_field_for_16_bit_floats(datatype: str) -> None:
    with pytest.raises(
        CodecError, match=f"^tensor 'x': {datatype} cannot be sent in typed contents; use raw_input_contents$"
    ):
        tensor_from_contents("x", datatype, [1], pb.InferTensorContents())
    with pytest.raises(CodecError, match=f"^{datatype} cannot be sent in typed contents"):
        tensor_to_contents(np.zeros(1, numpy_dtype(datatype)), datatype, pb.InferTensorContents())


def _values_one_by_one(contents: Any, field: str, dtype: np.dtype) -> np.ndarray:
    """The slow, obvious decoding: every element through Python."""
    return np.array(list(getattr(contents, field)), dtype=dtype)


@settings(max_examples=60)
@given(
    datatype=st.sampled_from(["FP32", "FP64"]),
    data=st.data(),
)
def test_fixed_width_contents_are_read_from_the_wire_bit_for_bit(datatype: str, data: Any) -> None:
    """FP32 / FP64 contents are taken from the serialised field (``_packed_field``): every value,
    NaN payloads, infinities, -0.0 and subnormals included, comes out bit for bit, whatever other
    fields the message also carries."""
    dtype = np.dtype("<f4" if datatype == "FP32" else "<f8")
    bits = np.dtype(f"<u{dtype.itemsize}")
    raw = data.draw(hnp.arrays(bits, st.integers(0, 64)))  # every bit pattern, as the wire can carry
    values = raw.view(dtype)
    contents = pb.InferTensorContents()
    getattr(contents, CONTENTS_FIELD[datatype]).extend(values.tolist())
    if data.draw(st.booleans()):  # other fields around it are skipped
        contents.int_contents.extend([1, -2, 3])
        contents.bytes_contents.append(b"\x00\x01")
    parsed = pb.InferTensorContents.FromString(contents.SerializeToString())
    out = tensor_from_contents("x", datatype, [values.size], parsed)
    expected = _values_one_by_one(parsed, CONTENTS_FIELD[datatype], dtype)
    assert out.dtype == dtype and out.shape == (values.size,)
    assert out.view(bits).tolist() == expected.view(bits).tolist()


def test_fixed_width_contents_sent_unpacked_are_read_too() -> None:
    """A client may send a repeated float field unpacked (one key per value); the parsed message
    serialises it packed, so the wire path still finds every value in order."""
    number = pb.InferTensorContents.DESCRIPTOR.fields_by_name["fp32_contents"].number
    values = np.array([1.5, -0.0, np.inf, 3e-39], dtype="<f4")
    unpacked = b"".join(bytes([number << 3 | 5]) + value.tobytes() for value in values)
    parsed = pb.InferTensorContents.FromString(unpacked)
    out = tensor_from_contents("x", "FP32", [2, 2], parsed)
    assert out.shape == (2, 2)
    assert out.reshape(-1).view("<u4").tolist() == values.view("<u4").tolist()


def test_contents_errors() -> None:
    contents = pb.InferTensorContents(int_contents=[1, 2])
    with pytest.raises(CodecError, match=r"^tensor 'x': shape \[3\] needs 3 elements but int_contents holds 2$"):
        tensor_from_contents("x", "INT32", [3], contents)
    with pytest.raises(CodecError, match="^tensor 'x': data does not fit INT8: "):
        tensor_from_contents("x", "INT8", [1], pb.InferTensorContents(int_contents=[300]))
    with pytest.raises(CodecError, match="^tensor 'x': data does not fit UINT16: "):
        tensor_from_contents("x", "UINT16", [1], pb.InferTensorContents(uint_contents=[70000]))


# --- HTTP body (binary tensor extension) ------------------------------------------------------------


def test_body_with_binary_and_json_tensors_round_trips() -> None:
    blobs: list[bytes | memoryview] = []
    tensors = {dt: sample(dt) for dt in DATATYPES}
    entries = [
        write_tensor(f"t_{dt}", array, dt, binary=index % 2 == 0, blobs=blobs)
        for index, (dt, array) in enumerate(tensors.items())
    ]
    body, header_length = join_body({"id": "r", "inputs": entries}, blobs)
    assert header_length is not None
    header, blob = split_body(body, str(header_length))
    assert header["id"] == "r"
    decoded = read_tensors(header["inputs"], blob)
    assert [entry["name"] for entry, _ in decoded] == [f"t_{dt}" for dt in DATATYPES]
    for (entry, array), (dt, expected) in zip(decoded, tensors.items(), strict=True):
        assert entry["datatype"] == dt
        assert_same(array, expected)


def test_json_only_body_has_no_header_length() -> None:
    blobs: list[bytes | memoryview] = []
    entry = write_tensor("x", np.array([1, 2], np.int32), "INT32", False, blobs)
    assert entry == {"name": "x", "datatype": "INT32", "shape": [2], "data": [1, 2]}
    body, header_length = join_body({"inputs": [entry]}, blobs)
    assert header_length is None
    header, blob = split_body(body, None)
    assert len(blob) == 0
    assert read_tensors(header["inputs"], blob)[0][1].tolist() == [1, 2]


def test_write_tensor_keeps_extra_parameters() -> None:
    blobs: list[bytes | memoryview] = []
    entry = write_tensor("x", np.zeros(3, np.float32), "FP32", True, blobs, {"custom": 1})
    assert entry["parameters"] == {"custom": 1, "binary_data_size": 12}


def _entry(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "x", "datatype": "INT32", "shape": [2], "parameters": {"binary_data_size": 8}}
    entry.update(overrides)
    return entry


@pytest.mark.parametrize(
    ("entries", "blob", "message"),
    [
        ([_entry()], b"\0" * 4, "tensor 'x': binary_data_size 8 runs past the end of the body (4 bytes remain)"),
        (
            [_entry(), _entry(name="y")],
            b"\0" * 12,
            "tensor 'y': binary_data_size 8 runs past the end of the body (4 bytes remain)",
        ),
        ([_entry()], b"\0" * 12, "4 bytes of binary data follow the tensors and belong to none"),
        ([], b"\0", "1 bytes of binary data follow the tensors and belong to none"),
        (
            [_entry(parameters={"binary_data_size": -8})],
            b"",
            "tensor 'x': binary_data_size must be a non-negative integer",
        ),
        (
            [_entry(parameters={"binary_data_size": 8.0})],
            b"\0" * 8,
            "tensor 'x': binary_data_size must be a non-negative integer",
        ),
        (
            [_entry(parameters={"binary_data_size": True})],
            b"\0",
            "tensor 'x': binary_data_size must be a non-negative integer",
        ),
        (
            [_entry(parameters={"binary_data_size": 4})],
            b"\0" * 4,
            "tensor 'x': expected 8 bytes for INT32 shape [2], got 4",
        ),
        ([_entry(parameters=["binary_data_size", 8])], b"", "tensor 'x': 'parameters' must be a JSON object"),
        ([_entry(parameters={})], b"", "tensor 'x' has neither 'data' nor a binary_data_size parameter"),
        ([_entry(name="")], b"", "inputs[0] has no 'name'"),
        ([_entry(name=3)], b"", "inputs[0] has no 'name'"),
        ([_entry(datatype=None)], b"", "tensor 'x' has no 'datatype'"),
        ([_entry(datatype="FP8")], b"\0" * 8, "unsupported datatype 'FP8'"),
        ([_entry(shape=None)], b"", "tensor 'x' has no 'shape'"),
        (["x"], b"", "inputs[0] must be a JSON object"),
        ({"name": "x"}, b"", "'inputs' must be a list of tensors"),
    ],
)
def test_read_tensors_errors(entries: Any, blob: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=f"^{re.escape(message)}"):
        read_tensors(entries, memoryview(blob))


def test_read_tensors_names_the_kind() -> None:
    with pytest.raises(CodecError, match=r"^outputs\[0\] has no 'name'$"):
        read_tensors([{}], memoryview(b""), kind="outputs")


@pytest.mark.parametrize(
    ("body", "header_length", "message"),
    [
        (b'{"inputs": []}', 100, f"{HEADER_LENGTH} is 100 but the body holds only 14 bytes"),
        (b'{"inputs": []}', -1, f"{HEADER_LENGTH} is -1 but the body holds only 14 bytes"),
        (b'{"inputs": []}', "ten", f"{HEADER_LENGTH} must be an integer, got 'ten'"),
        (b'{"inputs": [}', None, "malformed JSON in request body: "),
        (b'{"inputs": []}xyz', 15, "malformed JSON in request body: "),
        (b"\xff\xfe", None, "malformed JSON in request body: "),
        (b"", None, "malformed JSON in request body: "),
        (b"[1, 2]", None, "request body must be a JSON object, got list"),
        (b'"text"', None, "request body must be a JSON object, got str"),
        (b"null", "4", "request body must be a JSON object, got NoneType"),
    ],
)
def test_split_body_errors(body: bytes, header_length: Any, message: str) -> None:
    with pytest.raises(CodecError, match=f"^{re.escape(message)}"):
        split_body(body, header_length)


def test_deeply_nested_json_is_a_codec_error() -> None:
    with pytest.raises(CodecError, match="request body"):
        loads_json(b"[" * 100_000 + b"]" * 100_000)


# --- bfloat16 --------------------------------------------------------------------------------------


def test_bf16_widening_then_rounding_is_the_identity_on_every_pattern() -> None:
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    floats = bf16_to_float32(bits)
    back = float32_to_bf16(floats)
    finite_or_inf = ~np.isnan(floats)
    np.testing.assert_array_equal(back[finite_or_inf], bits[finite_or_inf])
    assert np.isnan(bf16_to_float32(back[~finite_or_inf])).all()


def test_bf16_rounds_to_nearest_even() -> None:
    # 1 + 2**-8 lies halfway between 1 and 1 + 2**-7: ties go to the even pattern (1.0).
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, np.float32(3.4e38), -np.inf], np.float32)
    assert bf16_to_float32(float32_to_bf16(values)).tolist() == [1.0, 1 + 2**-6, 1 + 2**-7, np.inf, -np.inf]


def test_bf16_matches_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            rng.standard_normal(10_000).astype(np.float32) * np.float32(1e3),
            rng.integers(0, 2**32, 10_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ]
    )
    values = values[~np.isnan(values)]
    expected = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(float32_to_bf16(values), expected)
    np.testing.assert_array_equal(bf16_to_float32(expected), expected.view(ml_dtypes.bfloat16).astype(np.float32))


# --- byte-for-byte agreement with tritonclient ------------------------------------------------------


def test_bytes_serialisation_matches_tritonclient() -> None:
    utils = pytest.importorskip("tritonclient.utils")
    for array in (sample("BYTES"), np.array(["plain", "\u00fcml\u00e4ut", ""], object), np.array([], object)):
        ours = encode_bytes_elements(array)
        theirs = utils.serialize_byte_tensor(array)
        assert ours == (theirs.item() if theirs.size else b"")
        if array.size:
            expected = utils.deserialize_bytes_tensor(ours).tolist()
            assert decode_bytes_elements("x", ours, array.size).tolist() == expected


def test_bf16_serialisation_matches_tritonclient() -> None:
    utils = pytest.importorskip("tritonclient.utils")
    ours = bytes(tensor_to_bytes(BF16_EXACT, "BF16"))
    if hasattr(utils, "serialize_bf16_tensor"):  # tritonclient before ml_dtypes
        assert ours == utils.serialize_bf16_tensor(BF16_EXACT).item()
    else:  # current tritonclient sends ml_dtypes.bfloat16 arrays as their raw bytes
        ml_dtypes = pytest.importorskip("ml_dtypes")
        assert utils.triton_to_np_dtype("BF16") == ml_dtypes.bfloat16
        assert ours == BF16_EXACT.astype(ml_dtypes.bfloat16).tobytes()


# --- properties ------------------------------------------------------------------------------------

SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)
#: Text that can be UTF-8 encoded (no lone surrogates).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=5)


#: Every BF16 bit pattern, and the finite ones (exponent bits not all ones). Drawn as bit patterns
#: rather than as float32 values rounded to BF16: a finite float32 above BF16's largest value rounds
#: to infinity, which JSON cannot carry (it travels as null and returns as NaN).
BF16_BITS = st.integers(min_value=0, max_value=0xFFFF)


def is_finite_bf16(bits: int) -> bool:
    """A BF16 pattern is NaN or infinity exactly when its eight exponent bits are all ones."""
    return bits & 0x7F80 != 0x7F80


FINITE_BF16_BITS = BF16_BITS.filter(is_finite_bf16)


@st.composite
def fixed_tensor(draw: st.DrawFn, finite: bool = False) -> tuple[str, np.ndarray]:
    """A random tensor of a random fixed-size datatype (BF16 as uint16 bit patterns)."""
    datatype = draw(st.sampled_from(FIXED_DATATYPES))
    dtype = numpy_dtype(datatype)
    shape = draw(SHAPES)
    if datatype == "BF16":
        return datatype, draw(hnp.arrays(np.uint16, shape, elements=FINITE_BF16_BITS if finite else BF16_BITS))
    if finite and dtype.kind == "f":
        elements = st.floats(width=8 * dtype.itemsize, allow_nan=False, allow_infinity=False)
        return datatype, draw(hnp.arrays(dtype, shape, elements=elements))
    return datatype, draw(hnp.arrays(dtype, shape))


def test_finite_bf16_bits_are_exactly_the_finite_bf16_values() -> None:
    """The JSON round trip draws BF16 tensors from FINITE_BF16_BITS; checked on all 65536 patterns.

    The strategy used to draw finite float32 values and round them, and 3.4e38 (Hypothesis' saved
    failure) rounds to BF16 infinity, which JSON carries as null and returns as NaN.
    """
    every_pattern = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    kept = np.array([is_finite_bf16(int(bits)) for bits in every_pattern])
    np.testing.assert_array_equal(kept, np.isfinite(bf16_to_float32(every_pattern)))
    assert not np.isfinite(bf16_to_float32(float32_to_bf16(np.array([3.4e38], np.float32))))[0]


def same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Bit-identical (so NaN payloads and -0.0 count)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()


@given(fixed_tensor())
def test_property_raw_bytes_round_trip(tensor: tuple[str, np.ndarray]) -> None:
    datatype, array = tensor
    raw = tensor_to_bytes(array, datatype)
    same_bits(tensor_from_bytes("x", datatype, list(array.shape), bytes(raw)), array)


bytes_tensor = SHAPES.flatmap(lambda shape: hnp.arrays(object, shape, elements=st.binary(max_size=20))).map(
    lambda a: ("BYTES", a)
)
text_tensor = SHAPES.flatmap(lambda shape: hnp.arrays(object, shape, elements=TEXT.map(str.encode))).map(
    lambda a: ("BYTES", a)
)


@given(
    st.lists(
        st.tuples(st.one_of(fixed_tensor(), bytes_tensor), st.just(True))
        | st.tuples(st.one_of(fixed_tensor(finite=True), text_tensor), st.booleans()),
        max_size=5,
    )
)
def test_property_body_round_trip(tensors: list[tuple[tuple[str, np.ndarray], bool]]) -> None:
    blobs: list[bytes | memoryview] = []
    entries = [
        write_tensor(f"t{i}", array, datatype, binary, blobs) for i, ((datatype, array), binary) in enumerate(tensors)
    ]
    body, header_length = join_body({"outputs": entries}, blobs)
    header, blob = split_body(body, header_length)
    decoded = read_tensors(header["outputs"], blob, "outputs")
    assert len(decoded) == len(tensors)
    for (entry, array), ((datatype, expected), binary) in zip(decoded, tensors, strict=True):
        assert entry["datatype"] == datatype
        if datatype == "BYTES":
            assert array.shape == expected.shape and array.tolist() == expected.tolist()
        elif binary:
            same_bits(array, expected)
        else:
            assert_same(array, expected)


@given(st.lists(st.binary(max_size=50), max_size=20))
def test_property_bytes_elements_round_trip(items: list[bytes]) -> None:
    array = np.empty(len(items), object)
    array[:] = items
    encoded = encode_bytes_elements(array)
    assert len(encoded) == 4 * len(items) + sum(map(len, items))
    assert decode_bytes_elements("x", encoded, len(items)).tolist() == items


@given(st.binary(max_size=64), st.integers(min_value=0, max_value=2**40))
def test_property_decode_bytes_elements_never_crashes(data: bytes, count: int) -> None:
    try:
        out = decode_bytes_elements("x", data, count)
    except CodecError:
        return
    assert len(out) == count


@given(st.binary(max_size=200), st.one_of(st.none(), st.integers(-5, 250), st.text(max_size=4)))
def test_property_random_bodies_decode_or_raise_codec_error(body: bytes, header_length: Any) -> None:
    try:
        header, blob = split_body(body, header_length)
        read_tensors(header.get("inputs"), blob)
    except CodecError:
        pass


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=10
)
DIMS = st.integers(min_value=-2, max_value=4) | st.sampled_from([2**31, 2**40, 2**62, 2**64 - 1]) | JSON_SCALARS


@st.composite
def hostile_entry(draw: st.DrawFn) -> Any:
    """A tensor entry that is plausible enough to reach deep into the decoder, but may be wrong anywhere."""
    entry: dict[str, Any] = {
        "name": draw(st.sampled_from(["a", "b", ""]) | JSON_SCALARS),
        "datatype": draw(st.sampled_from([*DATATYPES, "FP8"]) | JSON_SCALARS),
        "shape": draw(st.lists(DIMS, max_size=4) | JSON_VALUES),
    }
    if draw(st.booleans()):
        entry["parameters"] = {"binary_data_size": draw(st.integers(-2, 40) | DIMS)}
    else:
        entry["data"] = draw(JSON_VALUES)
    for key in draw(st.sets(st.sampled_from(["name", "datatype", "shape"]), max_size=1)):
        del entry[key]
    return draw(st.just(entry) | JSON_VALUES)


@settings(max_examples=300)
@given(st.lists(hostile_entry(), max_size=3) | JSON_VALUES, st.binary(max_size=64))
def test_property_hostile_headers_decode_or_raise_codec_error(entries: Any, blob: bytes) -> None:
    body, header_length = join_body({"inputs": entries}, [blob])
    try:
        header, rest = split_body(body, header_length)
        read_tensors(header["inputs"], rest)
    except CodecError:
        pass
