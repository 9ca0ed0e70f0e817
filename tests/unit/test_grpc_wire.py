"""grpc_wire: a received ModelInferRequest's raw tensors are views into its bytes, and the split
decode answers exactly what protobuf's whole parse answered."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from ferry.api import grpc_codec, grpc_wire
from ferry.types import InferenceRequest
from ferry_client.protocol import grpc_service_pb2 as pb

from .test_server_codecs_fuzz import CALLER_ERRORS, FUZZ, grpc_messages


def _two_raw_inputs() -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m", id="7")
    message.inputs.add(name="a", datatype="FP32", shape=[2, 3])
    message.inputs.add(name="b", datatype="UINT8", shape=[5])
    message.raw_input_contents.append(np.arange(6, dtype="<f4").tobytes())
    message.parameters["priority"].int64_param = 2
    message.raw_input_contents.append(bytes(range(5)))
    return message


def test_raw_tensors_are_views_into_the_bytes_received() -> None:
    wire = _two_raw_inputs().SerializeToString()
    received = grpc_wire.parse_infer_request(wire, split_from=0)
    request = grpc_codec.decode_infer_request(received.message, raw=received.raw)
    whole = np.frombuffer(wire, dtype=np.uint8)
    for name in ("a", "b"):
        assert np.shares_memory(request.inputs[name], whole), name
    np.testing.assert_array_equal(request.inputs["a"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert not received.message.raw_input_contents  # protobuf never parsed (copied) them
    assert received.serialized() is wire
    # counted: the bytes, and protobuf's parse of the rest (joined, then parsed)
    rest = len(wire) - 4 * 6 - 5 - 2 * 2
    assert received.peak == grpc_wire.peak_bytes(wire, split_from=0) == len(wire) + 2 * rest


def test_a_message_without_raw_contents_is_parsed_whole_and_counted_twice() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="a", datatype="FP32", shape=[3]).contents.fp32_contents.extend([1, 2, 3])
    wire = message.SerializeToString()
    received = grpc_wire.parse_infer_request(wire, split_from=0)
    assert received.message == message and received.wire is None
    assert received.peak == grpc_wire.peak_bytes(wire, split_from=0) == 2 * len(wire)


def _one_raw_input(size: int) -> bytes:
    """A serialised request with one raw UINT8 input whose message is ``size`` bytes long."""
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="a", datatype="UINT8", shape=[size])
    message.raw_input_contents.append(b"")
    for _ in range(3):  # the payload less the rest, whose varints shrink with it
        payload = size - (len(message.SerializeToString()) - len(message.raw_input_contents[0]))
        message.inputs[0].shape[0] = payload
        message.raw_input_contents[0] = bytes(payload)
    wire = message.SerializeToString()
    assert len(wire) == size, len(wire)
    return wire


def test_a_message_under_the_split_size_is_parsed_whole_and_counted_thrice() -> None:
    """Small messages skip the scan (it costs more than their copies): protobuf parses them whole, and
    admission counts the bytes, protobuf's parse and the raw entries' copies once read."""
    small = _one_raw_input(grpc_wire.SPLIT_FROM_BYTES - 1)
    received = grpc_wire.parse_infer_request(small)
    assert received.wire is None and bytes(received.raw[0]) == bytes(len(received.raw[0]))
    assert received.peak == grpc_wire.peak_bytes(small) == 3 * len(small)
    large = _one_raw_input(grpc_wire.SPLIT_FROM_BYTES)
    received = grpc_wire.parse_infer_request(large)
    assert received.wire is large and isinstance(received.raw[0], memoryview)
    assert received.peak == grpc_wire.peak_bytes(large) < 2 * len(large)


@pytest.mark.parametrize(
    "wire",
    [
        b"\x2a\x02\xff\xff" + b"\x3a\x03abc",  # split (a well-formed field 7), the rest's input malformed
        b"\x3a\x03abc\x2a\x05ab",  # a length past the end
        b"\x3a\x03abc\x0b",  # a group
        b"\x3a\x03ab",  # a truncated raw entry
        b"\xff" * 32,  # an overlong varint
        b"\xba\x80\x80\x80\x80\x00\x01a",  # field 7's tag in six bytes (protobuf reads at most five)
    ],
)
def test_malformed_bytes_raise_protobufs_decode_error(wire: bytes) -> None:
    with pytest.raises(DecodeError):
        pb.ModelInferRequest.FromString(wire)
    with pytest.raises(DecodeError):
        grpc_wire.parse_infer_request(wire, split_from=0)


@pytest.mark.parametrize("wire", [b"\x38\x01", b"\x3a\x01a\x3d\x00\x00\x00\x00", b"\x3a\x01a\x0b\x0c"])
def test_unusual_wire_data_is_parsed_whole(wire: bytes) -> None:
    """A field 7 that is not length-delimited (protobuf keeps it as an unknown field), a group."""
    assert grpc_wire.raw_spans(wire) is None
    _old_and_new(wire)


def _outcome(decode: object) -> tuple[str, InferenceRequest | None]:
    try:
        return "ok", decode()  # type: ignore[operator]
    except CALLER_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}", None
    except DecodeError:
        return "DecodeError", None


def _assert_same(old: InferenceRequest, new: InferenceRequest) -> None:
    assert (old.model_name, old.model_version, old.id, old.parameters) == (
        new.model_name,
        new.model_version,
        new.id,
        new.parameters,
    )
    assert old.outputs == new.outputs and old.shared_memory_inputs == new.shared_memory_inputs
    assert old.input_datatypes == new.input_datatypes and list(old.inputs) == list(new.inputs)
    for name, array in old.inputs.items():
        assert array.dtype == new.inputs[name].dtype and array.shape == new.inputs[name].shape
        if array.dtype == object:
            assert array.tolist() == new.inputs[name].tolist()
        else:
            np.testing.assert_array_equal(array, new.inputs[name])


def _old_and_new(wire: bytes) -> None:
    old, old_request = _outcome(lambda: grpc_codec.decode_infer_request(pb.ModelInferRequest.FromString(wire)))

    def new_decode() -> InferenceRequest:
        received = grpc_wire.parse_infer_request(wire, split_from=0)
        return grpc_codec.decode_infer_request(received.message, raw=received.raw)

    new, new_request = _outcome(new_decode)
    assert old == new
    if old_request is not None and new_request is not None:
        _assert_same(old_request, new_request)


@FUZZ
@given(grpc_messages(), st.integers(0, 3))
def test_property_the_split_decode_equals_protobufs_whole_parse(message: pb.ModelInferRequest, moved: int) -> None:
    """The same answer (request or error) as parsing the whole message, with raw entries anywhere
    among the other fields (a client may write fields in any order)."""
    wire = message.SerializeToString()
    spans = grpc_wire.raw_spans(wire)
    assert spans is not None and len(spans) == len(message.raw_input_contents)
    if spans and moved:  # the first raw entries moved to the front, before every other field
        front, others, position = spans[:moved], [], 0
        for start, _, end in front:
            others.append(wire[position:start])
            position = end
        wire = b"".join(wire[start:end] for start, _, end in front) + b"".join(others) + wire[position:]
    _old_and_new(wire)


@FUZZ
@given(grpc_messages(), st.data())
def test_property_damaged_bytes_get_the_same_answer(message: pb.ModelInferRequest, data: st.DataObject) -> None:
    """Truncated or altered bytes: protobuf's DecodeError both ways, or the same request."""
    wire = bytearray(message.SerializeToString())
    if wire and data.draw(st.booleans()):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    else:
        del wire[data.draw(st.integers(0, len(wire))) :]
    _old_and_new(bytes(wire))


def test_many_fields_are_parsed_whole() -> None:
    """Past MAX_SCANNED_FIELDS the scan stops (it runs in Python, on the event loop)."""
    message = pb.ModelInferRequest(model_name="m")
    for index in range(grpc_wire.MAX_SCANNED_FIELDS + 1):
        message.raw_input_contents.append(bytes([index % 256]))
    wire = message.SerializeToString()
    assert grpc_wire.raw_spans(wire) is None
    received = grpc_wire.parse_infer_request(wire, split_from=0)
    assert received.wire is None and len(received.raw) == grpc_wire.MAX_SCANNED_FIELDS + 1


#: Pieces of tags and lengths (field 7's and others', short and overlong) to build wire data from.
WIRE_PIECES = [b"\x3a", b"\xba", b"\x80", b"\x81", b"\x00", b"\x01", b"\x02", b"a", b"\x2a", b"\x0b", b"\x0c", b"\xff"]


@FUZZ
@given(st.lists(st.sampled_from(WIRE_PIECES), max_size=24))
def test_property_odd_wire_data_gets_the_same_answer(pieces: list[bytes]) -> None:
    """Tags and lengths in any encoding protobuf might or might not accept: the same answer."""
    _old_and_new(b"".join(pieces))
