"""A received ModelInferRequest whose raw tensors stay where they arrived: views into its bytes.

Why: parsed whole by protobuf (upb), a message's tensors existed three times, grpc's bytes, upb's
parse and a fresh ``bytes`` per ``raw_input_contents[i]`` access (which numpy then viewed), and
admission counted two of them. Here the top-level fields of the received bytes are scanned (a tag
varint, a length-delimited payload skipped): each ``raw_input_contents`` entry becomes a memoryview
of the bytes, and protobuf parses only the rest (the bytes without those fields: a message's
names, shapes, parameters and typed contents). A message's tensors then exist once, in the bytes
grpc handed over, for as long as the request holds them.

A message under ``SPLIT_FROM_BYTES`` is not scanned either: protobuf parses it whole, which for a
few kilobytes costs less than the scan's Python loop (two scans, 16 varints each, on every tiny
request), and its copies are small.

Anything unusual (groups, a field 7 not length-delimited, a field number 0, a tag of more than
five bytes, a truncated or overlong varint, a length past the end, more than ``MAX_SCANNED_FIELDS``
fields) is not split: protobuf parses the whole message as before, and judges it (malformed bytes:
its DecodeError, which ``grpc_decode`` answers with INVALID_ARGUMENT), so the scan never accepts
what protobuf refuses.
"""

from __future__ import annotations

from collections.abc import Sequence

from ferry_client.protocol import grpc_service_pb2 as pb

#: The field number of ``ModelInferRequest.raw_input_contents``.
RAW_INPUT_CONTENTS = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number

#: Top-level fields scanned at most (a request has a few per input); past it the message is parsed
#: whole: the scan runs in Python, on the event loop for the count, and must stay short.
MAX_SCANNED_FIELDS = 1024

#: Messages this size and larger are scanned and split; smaller ones are parsed whole (their
#: copies cost less than the scan). 64 KiB: where copying a message twice costs what the scan does.
SPLIT_FROM_BYTES = 64 * 1024

_LENGTH_DELIMITED = 2
#: The longest tag protobuf reads (a uint32 varint: upb refuses a longer one, so must the scan).
_MAX_TAG_BYTES = 5
#: Bytes a wire type's value takes when fixed (varints are read instead).
_FIXED_SIZE = {1: 8, 5: 4}


class ReceivedInferRequest:
    """A ModelInferRequest as the server received it: ``message``, its fields (without
    ``raw_input_contents`` when split), ``raw``, its raw tensors (views into ``wire`` when split),
    ``size``, its size on the wire, and ``peak``, the bytes it holds once parsed (admission's count)."""

    __slots__ = ("message", "raw", "size", "peak", "wire")

    def __init__(
        self, message: pb.ModelInferRequest, raw: Sequence[bytes | memoryview], size: int, peak: int, wire: bytes | None
    ) -> None:
        self.message = message
        self.raw = raw
        self.size = size
        self.peak = peak
        self.wire = wire  # the bytes received, when ``raw`` views into them

    def serialized(self) -> bytes:
        """The message on the wire: the bytes received when kept, else protobuf's serialisation."""
        return self.wire if self.wire is not None else self.message.SerializeToString()


def raw_spans(wire: bytes) -> list[tuple[int, int, int]] | None:
    """(field start, payload start, end) of each ``raw_input_contents`` entry of the serialised
    ModelInferRequest ``wire``, in order; None when it is not to be split (see the module docstring)."""
    spans = []
    position, end, fields = 0, len(wire), 0
    while position < end:
        fields += 1
        if fields > MAX_SCANNED_FIELDS:
            return None
        start = position
        key, position = _varint(wire, position)
        number, kind = key >> 3, key & 7
        if key < 0 or number == 0 or position - start > _MAX_TAG_BYTES or key >= 2**32:
            return None
        if kind == _LENGTH_DELIMITED:
            length, position = _varint(wire, position)
            if length < 0 or position + length > end:
                return None
            if number == RAW_INPUT_CONTENTS:
                spans.append((start, position, position + length))
            position += length
        elif number == RAW_INPUT_CONTENTS:
            return None  # not bytes: protobuf judges it
        elif kind == 0:
            _, position = _varint(wire, position)
            if position < 0:
                return None
        elif kind in _FIXED_SIZE:
            position += _FIXED_SIZE[kind]
            if position > end:
                return None
        else:
            return None  # groups and invalid wire types
    return spans


def _varint(wire: bytes, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it; (-1, -1) when truncated or overlong."""
    value = shift = 0
    end = min(len(wire), position + 10)
    while position < end:
        byte = wire[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    return -1, -1


def _parsed_whole(size: int, split_from: int) -> int:
    """What a message of ``size`` bytes that protobuf parses whole holds: its bytes and the parse, and
    under ``split_from`` its raw entries again (unscanned, it may hold some, each copied when read)."""
    return (3 if size < split_from else 2) * size


def peak_bytes(wire: bytes, split_from: int = SPLIT_FROM_BYTES) -> int:
    """What the message ``wire`` holds once parsed: its bytes, and what protobuf parses (twice: the
    bytes without raw contents, joined, then parsed), or ``_parsed_whole`` when parsed whole."""
    spans = raw_spans(wire) if len(wire) >= split_from else None
    if not spans:
        return _parsed_whole(len(wire), split_from)
    rest = len(wire) - sum(end - start for start, _, end in spans)
    return len(wire) + 2 * rest


def parse_infer_request(wire: bytes, split_from: int = SPLIT_FROM_BYTES) -> ReceivedInferRequest:
    """``wire`` parsed: raw tensors as views into it, the rest by protobuf (its DecodeError for
    malformed bytes); whole, by protobuf, when shorter than ``split_from``."""
    spans = raw_spans(wire) if len(wire) >= split_from else None
    if not spans:  # small, no raw contents, or not to be split: protobuf parses it whole
        message = pb.ModelInferRequest.FromString(wire)
        peak = _parsed_whole(len(wire), split_from)
        return ReceivedInferRequest(message, message.raw_input_contents, len(wire), peak, None)
    view = memoryview(wire)
    pieces, position = [], 0
    for start, _, end in spans:
        pieces.append(view[position:start])
        position = end
    pieces.append(view[position:])
    rest = b"".join(pieces)
    message = pb.ModelInferRequest.FromString(rest)
    raw = [view[start:end] for _, start, end in spans]
    return ReceivedInferRequest(message, raw, len(wire), len(wire) + 2 * len(rest), wire)
