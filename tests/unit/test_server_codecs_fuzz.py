"""Property tests for the server's own wire decoders (the client codec has its own in test_codec.py).

Whatever arrives, ``decompress`` and the REST / gRPC ``decode_infer_request`` either return a
well-formed request or raise InvalidArgument / PayloadTooLarge; no other exception may escape, since
that would be a 500 / INTERNAL for what is the caller's mistake.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import zlib
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ferry.api import grpc_codec, http_codec
from ferry.errors import InvalidArgument, PayloadTooLarge
from ferry.types import InferenceRequest
from ferry_client.codec import DATATYPES, join_body, numpy_dtype
from ferry_client.protocol import grpc_service_pb2 as pb

from .test_codec import JSON_VALUES, hostile_entry

CALLER_ERRORS = (InvalidArgument, PayloadTooLarge)
FUZZ = settings(max_examples=300)


def assert_well_formed(request: InferenceRequest, declared: dict[str, tuple[str, list[int]]]) -> None:
    """Every decoded input has exactly the declared datatype and shape."""
    assert set(request.inputs) == set(declared)
    for name, array in request.inputs.items():
        datatype, shape = declared[name]
        assert request.input_datatypes[name] == datatype
        assert list(array.shape) == shape
        if datatype not in ("BYTES", "BF16"):
            assert array.dtype == numpy_dtype(datatype)


# --- Content-Encoding -----------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=2048), st.sampled_from(["gzip", "deflate"]), st.integers(1, 4096))
def test_property_decompress_round_trip_or_too_large(data: bytes, encoding: str, limit: int) -> None:
    compressed = gzip.compress(data) if encoding == "gzip" else zlib.compress(data)
    try:
        out = http_codec.decompress(compressed, encoding, limit)
    except PayloadTooLarge:
        assert len(data) > limit
    else:
        assert out == data and len(data) <= limit


@FUZZ
@given(
    st.binary(max_size=512), st.sampled_from(["gzip", "deflate", "identity", "br", "", "GZIP"]), st.integers(1, 4096)
)
def test_property_decompress_garbage_is_a_caller_error(data: bytes, encoding: str, limit: int) -> None:
    with contextlib.suppress(*CALLER_ERRORS):
        http_codec.decompress(data, encoding, limit)


@given(st.binary(min_size=1, max_size=512), st.sampled_from(["gzip", "deflate"]), st.data())
def test_property_truncated_streams_are_invalid(data: bytes, encoding: str, draw: st.DataObject) -> None:
    compressed = gzip.compress(data) if encoding == "gzip" else zlib.compress(data)
    cut = draw.draw(st.integers(0, len(compressed) - 1))
    try:
        http_codec.decompress(compressed[:cut], encoding, 1 << 20)
    except InvalidArgument:
        return
    raise AssertionError("a truncated stream was accepted")


def test_decompression_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB
    try:
        http_codec.decompress(bomb, "gzip", 1 << 20)
    except PayloadTooLarge as exc:
        assert "exceeds the limit of 1048576 bytes" in exc.message
    else:
        raise AssertionError("the bomb was inflated")


# --- REST bodies ------------------------------------------------------------------------------------


JSON_ELEMENTS = {
    "INT32": st.integers(-(2**31), 2**31 - 1),
    "UINT8": st.integers(0, 255),
    "BOOL": st.booleans(),
    "FP32": st.floats(width=32, allow_nan=False, allow_infinity=False),
    "BYTES": st.text(max_size=4),
}


@st.composite
def valid_json_entry(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON tensor whose data fits its shape and datatype, so decoding succeeds and is checked."""
    datatype = draw(st.sampled_from(sorted(JSON_ELEMENTS)))
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    data = draw(st.lists(JSON_ELEMENTS[datatype], min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    return {"name": draw(st.sampled_from(["a", "b", "c"])), "datatype": datatype, "shape": shape, "data": data}


@st.composite
def rest_bodies(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """A V2 body whose header fields are each either plausible or any JSON value, maybe with binary parts."""
    header: dict[str, Any] = {}
    if draw(st.integers(0, 3)) == 0:  # a quarter of the bodies are coherent, so success paths are checked too
        header["inputs"] = draw(st.lists(valid_json_entry(), max_size=3, unique_by=lambda e: e["name"]))
        return json.dumps(header).encode(), None
    if draw(st.booleans()):
        header["inputs"] = draw(st.lists(valid_json_entry() | hostile_entry(), max_size=3) | JSON_VALUES)
    for key, plausible in (
        (
            "outputs",
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["OUTPUT0", "x"])},
                    optional={
                        "parameters": st.fixed_dictionaries(
                            {},
                            optional={
                                "binary_data": st.booleans() | JSON_VALUES,
                                "classification": st.integers(-3, 5) | JSON_VALUES,
                            },
                        )
                    },
                ),
                max_size=2,
            ),
        ),
        ("parameters", st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=3)),
        ("id", st.text(max_size=5)),
    ):
        if draw(st.booleans()):
            header[key] = draw(plausible | JSON_VALUES)
    blob = draw(st.binary(max_size=64))
    if draw(st.booleans()):
        body, length = join_body(header, [blob])
        return body, None if length is None else str(length)
    return json.dumps(header).encode(), draw(st.none() | st.sampled_from(["0", "-1", "x", "99999"]))


@FUZZ
@given(rest_bodies())
def test_property_rest_infer_bodies_decode_or_raise_invalid_argument(body: tuple[bytes, str | None]) -> None:
    payload, header_length = body
    try:
        request = http_codec.decode_infer_request("m", "", payload, header_length)
    except CALLER_ERRORS:
        return
    header = json.loads(payload[: int(header_length)] if header_length else payload)
    assert_well_formed(
        request, {e["name"]: (e["datatype"], list(e["shape"])) for e in header.get("inputs", [])}
    )  # none: the model names what is missing


# --- gRPC messages ----------------------------------------------------------------------------------


DIMS = st.integers(-2, 6) | st.sampled_from([2**31, 2**40, 2**62, -(2**63)])


@st.composite
def grpc_messages(draw: st.DrawFn) -> pb.ModelInferRequest:
    """A ModelInferRequest with random tensor headers and contents that may or may not fit them."""
    message = pb.ModelInferRequest(model_name="m", id=draw(st.text(max_size=4)))
    raw = draw(st.booleans())
    coherent = draw(st.integers(0, 3)) == 0  # a quarter of the messages decode, so success paths are checked too
    for index in range(draw(st.integers(0, 3))):
        tensor = message.inputs.add(
            name=f"in{index}" if coherent else draw(st.sampled_from(["a", "b", ""])),
            datatype=draw(st.sampled_from(["INT32", "FP64", "UINT8"] if coherent else [*DATATYPES, "FP8", ""])),
        )
        if (coherent or draw(st.booleans())) and tensor.datatype in ("INT32", "FP64", "UINT8"):
            count = draw(st.integers(0, 6))
            tensor.shape.extend([count])
            if raw:
                message.raw_input_contents.append(bytes(count * numpy_dtype(tensor.datatype).itemsize))
            elif tensor.datatype == "FP64":
                tensor.contents.fp64_contents.extend([0.5] * count)
            else:
                getattr(tensor.contents, "int_contents" if tensor.datatype == "INT32" else "uint_contents").extend(
                    [1] * count
                )
            continue
        tensor.shape.extend(draw(st.lists(DIMS, max_size=3)))
        if raw:
            message.raw_input_contents.append(draw(st.binary(max_size=48)))
            continue
        contents = tensor.contents
        choice = draw(st.sampled_from(["int", "int64", "uint", "uint64", "fp32", "fp64", "bool", "bytes", "none"]))
        values = {
            "int": (contents.int_contents, st.integers(-(2**31), 2**31 - 1)),
            "int64": (contents.int64_contents, st.integers(-(2**63), 2**63 - 1)),
            "uint": (contents.uint_contents, st.integers(0, 2**32 - 1)),
            "uint64": (contents.uint64_contents, st.integers(0, 2**64 - 1)),
            "fp32": (contents.fp32_contents, st.floats(width=32)),
            "fp64": (contents.fp64_contents, st.floats()),
            "bool": (contents.bool_contents, st.booleans()),
            "bytes": (contents.bytes_contents, st.binary(max_size=6)),
        }.get(choice)
        if values is not None:
            field, elements = values
            field.extend(draw(st.lists(elements, max_size=12)))
    if coherent:
        return message
    if raw and draw(st.booleans()):
        message.raw_input_contents.append(b"extra")  # more raw entries than inputs
    for name in draw(st.lists(st.sampled_from(["o", ""]), max_size=2)):
        output = message.outputs.add(name=name)
        if draw(st.booleans()):
            output.parameters["classification"].int64_param = draw(st.integers(-(2**63), 2**63 - 1))
    for key in draw(st.lists(st.sampled_from(["priority", "timeout", "x"]), max_size=2)):
        kind = draw(st.sampled_from(["int64_param", "bool_param", "string_param"]))
        setattr(
            message.parameters[key],
            kind,
            draw(
                {
                    "int64_param": st.integers(-(2**63), 2**63 - 1),
                    "bool_param": st.booleans(),
                    "string_param": st.text(max_size=4),
                }[kind]
            ),
        )
    return message


@FUZZ
@given(grpc_messages())
def test_property_grpc_infer_messages_decode_or_raise_invalid_argument(message: pb.ModelInferRequest) -> None:
    try:
        request = grpc_codec.decode_infer_request(message)
    except CALLER_ERRORS:
        return
    assert_well_formed(request, {t.name: (t.datatype, list(t.shape)) for t in message.inputs})
    for array in request.inputs.values():
        assert isinstance(array, np.ndarray)
