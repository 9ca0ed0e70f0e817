"""The hand-off's messages as typed records, and their wire form.

Each message is a ``msgspec.Struct`` encoded as a JSON array whose first item names its type
(``["Infer", 7, "resnet", ...]``): compact, decoded straight into the record (types checked, so a
malformed frame fails to decode instead of reaching a handler), and JSON, never pickle: nothing that
reaches the socket can make a process run code. Everything one side sends in one loop turn is one
*frame*, decoded in one call: a batch's results reach an intake in one write, and an intake's
requests of one turn in one write too. A frame is its length (4 bytes, little-endian), its JSON's
length (the same), the JSON array of messages, then the payloads of the small answers sent inline
(``Result.inline`` bytes each, in the order of their messages): raw bytes, not base64 in the JSON.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from ..errors import InvalidArgument
from ..types import RequestedOutput, SharedMemoryInput

LENGTH_BYTES = 4


class Block(msgspec.Struct, array_like=True, frozen=True):
    """One side's block: in its arena (``key`` the offset) or a spill (``key`` the memfd)."""

    spill: bool
    key: int
    size: int


class Tensor(msgspec.Struct, array_like=True):
    """An array in a block or in a message's ``data``: ``dtype`` is numpy's (None: BYTES elements,
    length-prefixed)."""

    name: str
    dtype: str | None
    shape: tuple[int, ...]
    offset: int
    size: int


class Output(msgspec.Struct, array_like=True):
    """An answer's output tensor: where its array is, and how the caller asked for it."""

    tensor: Tensor
    datatype: str
    binary: bool
    shared_memory: dict[str, Any] | None


# --- intake to model process -------------------------------------------------------------------


class Hello(msgspec.Struct, tag=True, array_like=True):
    """The intake's first message: its row and its request arena (a memfd only it writes)."""

    row: int
    pid: int
    arena_fd: int
    arena_size: int


class Ready(msgspec.Struct, tag=True, array_like=True):
    """The intake's ports accept connections."""


class Infer(msgspec.Struct, tag=True, array_like=True):
    """A request whose input tensors are in ``block`` of the intake's arena. ``expect``: the load
    identity the inputs were pre-processed for; ``streamed``: it came on a ModelStreamInfer stream;
    ``elsewhere``: the bytes the intake's ticket holds for it (the model process's admission adds
    what it holds itself); ``regions``: the client's shared memory regions the intake read inputs
    from (or will write outputs to) through its mirror, by name, with the registration's generation
    (``RegionsChanged`` when one is no longer registered so)."""

    call: int
    model: str
    version: str
    id: str
    block: Block
    inputs: list[Tensor]
    datatypes: dict[str, str]
    outputs: list[RequestedOutput] | None
    parameters: dict[str, Any]
    shared: dict[str, SharedMemoryInput]
    client: str
    preprocessed: list[str]
    expect: str | None = None
    streamed: bool = False
    elsewhere: int = 0
    regions: dict[str, int] = {}


class Cancel(msgspec.Struct, tag=True, array_like=True):
    """The caller went away: cancel the call (it is still answered)."""

    call: int


class Free(msgspec.Struct, tag=True, array_like=True):
    """An answer's block is read: give it back (``ack``: answer ``Freed(ack)`` once uncounted)."""

    block: Block
    ack: int | None = None


class Describe(msgspec.Struct, tag=True, array_like=True):
    """Which load serves (model, version) now (``known``: the identity the intake has)."""

    call: int
    model: str
    version: str
    known: str


class DescribeRegion(msgspec.Struct, tag=True, array_like=True):
    """Where ``owner``'s system shared memory region ``name`` is (``SharedMemoryRegistry.describe``),
    for the intake to mirror it: answered ``Described`` or ``Failed``."""

    call: int
    owner: str
    name: str


class Stats(msgspec.Struct, tag=True, array_like=True):
    """What the intake's stages recorded for a load, added to its statistics."""

    identity: str
    kind: str
    args: list[Any]


# --- model process to intake -------------------------------------------------------------------


class Welcome(msgspec.Struct, tag=True, array_like=True):
    """The answer to ``Hello``: the response arena made for this intake."""

    pid: int
    arena_fd: int
    arena_size: int


class Result(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """A call's answer: its outputs in ``data`` (small answers: nothing to free) or in ``block`` of
    the response arena (given back by ``Free``). ``data`` never goes into the JSON: it travels in
    its frame's payloads (``inline`` says how many bytes), and the receiving ``Wire`` puts it back."""

    call: int
    model: str
    version: str
    id: str
    parameters: dict[str, Any]
    outputs: list[Output]
    block: Block | None = None
    inline: int = 0
    data: bytearray | None = None


class Results(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """The answers of a batch's planned requests of one signature, whose outputs have the same
    shapes: call ``calls[i]`` (request ``ids[i]``) has ``outputs`` at offset ``i * stride`` of
    ``data``, which travels as ``Result``'s does. One message a batch, where a ``Result`` each
    cost the model process's one core a message to build and encode per request."""

    calls: list[int]
    ids: list[str]
    model: str
    version: str
    outputs: list[Output]
    stride: int
    inline: int = 0
    data: bytearray | None = None


class Failed(msgspec.Struct, tag=True, array_like=True):
    """A call's (or a question's) error, as one process would raise it."""

    call: int
    kind: str
    message: str
    retry_after: float | None = None


class Stale(msgspec.Struct, tag=True, array_like=True):
    """The call's inputs were pre-processed for a load that no longer serves."""

    call: int


class Decoupled(msgspec.Struct, tag=True, array_like=True):
    """The call came on a stream for a decoupled model: its intake relays it instead."""

    call: int


class RegionsChanged(msgspec.Struct, tag=True, array_like=True):
    """A region the call's ``regions`` names was unregistered (or registered again) since the
    intake mirrored it: nothing ran; the intake mirrors it again and sends the call again."""

    call: int


class RegionGone(msgspec.Struct, tag=True, array_like=True):
    """``owner``'s region ``name`` of that ``generation`` was unregistered: a mirror of it closes
    (once the requests reading it end), so no intake keeps the client's object open."""

    owner: str
    name: str
    generation: int


class Freed(msgspec.Struct, tag=True, array_like=True):
    """The block of ``Free(..., ack=call)`` is given back and uncounted."""

    call: int


class Described(msgspec.Struct, tag=True, array_like=True):
    """The answer to ``Describe`` (``intake.model_directory``)."""

    call: int
    description: dict[str, Any]


ToModel = Hello | Ready | Infer | Cancel | Free | Describe | DescribeRegion | Stats
ToIntake = Welcome | Result | Results | Failed | Stale | Decoupled | RegionsChanged | RegionGone | Freed | Described
Message = ToModel | ToIntake


def _numpy_values(value: Any) -> Any:
    """Numpy scalars and arrays in parameters, as JSON values."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise NotImplementedError(f"{type(value).__name__} does not go through the hand-off")


class Wire:
    """One direction's codec: messages encoded one by one (a message that cannot be encoded fails
    its sender, not the frame), frames of them decoded in one call."""

    def __init__(self, receives: Any) -> None:
        self._encoder = msgspec.json.Encoder(enc_hook=_numpy_values)
        self._decoder = msgspec.json.Decoder(list[receives])

    def encode(self, message: Message) -> tuple[bytes, bytearray | None]:
        """``message`` as JSON, and the payload that follows it in the frame (an inline answer's
        ``data``); ``InvalidArgument`` for what JSON cannot carry (an integer past 64 bits,
        parameters nested past the recursion limit, an object of no JSON type)."""
        payload = None
        if isinstance(message, Result | Results) and message.data is not None:
            payload = message.data
            message = msgspec.structs.replace(message, inline=len(payload), data=None)
        try:
            return self._encoder.encode(message), payload
        except (msgspec.EncodeError, RecursionError, NotImplementedError, OverflowError, TypeError) as exc:
            raise InvalidArgument(f"a value that cannot travel between Ferry's processes as JSON: {exc}") from None

    @staticmethod
    def frame(encoded: list[bytes], payloads: list[bytearray]) -> bytes:
        """The frame of the messages encoded in one loop turn, with their payloads."""
        text = b"[" + b",".join(encoded) + b"]"
        body_bytes = LENGTH_BYTES + len(text) + sum(len(payload) for payload in payloads)
        head = body_bytes.to_bytes(LENGTH_BYTES, "little") + len(text).to_bytes(LENGTH_BYTES, "little")
        return b"".join((head, text, *payloads))

    def decode(self, body: memoryview | bytes) -> list[Message]:
        """A frame's messages (``body``: the frame less its length), inline answers' data restored
        (copied out of ``body``: the caller reuses it)."""
        end = LENGTH_BYTES + int.from_bytes(body[:LENGTH_BYTES], "little")
        messages: list[Message] = self._decoder.decode(body[LENGTH_BYTES:end])
        for message in messages:
            if isinstance(message, Result | Results) and message.inline:
                message.data = bytearray(body[end : end + message.inline])
                end += message.inline
        return messages
