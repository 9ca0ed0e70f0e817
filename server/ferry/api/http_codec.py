"""REST wire format <-> data-plane types: V2 JSON with the binary tensor data extension."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

from ferry_client.codec import CodecError, join_body, read_tensors, split_body, write_tensor

from ..errors import InvalidArgument, PayloadTooLarge
from ..types import InferenceRequest, InferenceResponse, RequestedOutput, SharedMemoryInput
from .limits import Limits
from .shared_memory import tensor_ref

DEFAULT_LIMITS = Limits()


#: Inflated output taken at a time, so what a body inflates to is counted as it grows.
INFLATE_STEP = 16 * 1024 * 1024


class Inflater:
    """Undo a gzip/deflate Content-Encoding a step at a time, never past ``limit`` bytes in all."""

    def __init__(self, body: bytes, encoding: str, limit: int) -> None:
        if encoding not in ("gzip", "deflate"):
            raise InvalidArgument(f"unsupported Content-Encoding '{encoding}'; use gzip or deflate")
        self.encoding = encoding
        self.limit = limit
        self.size = 0
        self._tail = body
        self._decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)

    @property
    def done(self) -> bool:
        return self._decompressor.eof or not self._tail

    def step(self) -> bytes:
        """The next piece of the plain body (blocking: run it on a worker thread)."""
        try:
            piece = self._decompressor.decompress(self._tail, min(INFLATE_STEP, self.limit + 1 - self.size))
        except zlib.error as exc:
            raise InvalidArgument(f"request body is not valid {self.encoding} data: {exc}") from None
        self._tail = self._decompressor.unconsumed_tail
        self.size += len(piece)
        if self.size > self.limit:
            raise PayloadTooLarge(f"decompressed request body exceeds the limit of {self.limit} bytes")
        if self.done and not self._decompressor.eof:
            raise InvalidArgument(f"request body is truncated {self.encoding} data")
        return piece


def decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    """Undo a gzip/deflate Content-Encoding without ever holding more than ``limit`` bytes."""
    if not encoding or encoding == "identity":
        return body
    inflater = Inflater(body, encoding, limit)
    pieces = [inflater.step()]
    while not inflater.done:
        pieces.append(inflater.step())
    return b"".join(pieces)


def compress_response(payload: bytes, accept_encoding: str | None) -> tuple[bytes, str | None]:
    """Compress an inference response as the client's Accept-Encoding allows (gzip preferred, then
    deflate in its zlib form, as tritonclient's ``response_compression_algorithm`` expects)."""
    accepted = _accepted_encodings(accept_encoding)
    if "gzip" in accepted:
        return gzip.compress(payload, compresslevel=6), "gzip"
    if "deflate" in accepted:
        return zlib.compress(payload, 6), "deflate"
    return payload, None


def _accepted_encodings(header: str | None) -> set[str]:
    """Codings named in Accept-Encoding without ``q=0``."""
    accepted = set()
    for item in (header or "").split(","):
        name, _, params = item.strip().partition(";")
        quality = params.strip().removeprefix("q=") if params.strip().startswith("q=") else "1"
        try:
            wanted = float(quality) > 0
        except ValueError:
            wanted = False
        if name and wanted:
            accepted.add(name.strip().lower())
    return accepted


def decode_infer_request(
    model_name: str,
    model_version: str,
    body: bytes | memoryview,
    header_length: str | None,
    limits: Limits = DEFAULT_LIMITS,
    blob: memoryview | None = None,
) -> InferenceRequest:
    """Build an InferenceRequest from a V2 JSON (+ binary) body, within ``limits``; ``blob``: its
    binary section when that was received apart (``body`` then holds the JSON header alone)."""
    if blob is not None:
        header_length = None
    json_size = len(body) if not header_length else int(header_length) if header_length.isdigit() else 0
    limits.check_json_size(json_size)
    try:
        header, rest = split_body(body, header_length)
        blob = rest if blob is None else blob
        parameters = header.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise CodecError("'parameters' must be a JSON object")
        # No 'inputs' at all reads as none: the model is resolved first (an unknown one is 404, as in
        # Triton), then its input check names what is missing.
        entries = header.get("inputs", [])
        _check_entries(entries, limits)
        in_memory, shared = _split_shared_memory(entries)
        decoded = read_tensors(in_memory, blob, "inputs")
    except CodecError as exc:
        raise InvalidArgument(str(exc)) from None
    inputs = {}
    datatypes = {}
    for entry, array in decoded:
        if entry["name"] in inputs or entry["name"] in shared:
            raise InvalidArgument(f"input '{entry['name']}' appears more than once")
        inputs[entry["name"]] = array
        datatypes[entry["name"]] = entry["datatype"]
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("'id' must be a string")
    return InferenceRequest(
        model_name=model_name,
        model_version=model_version,
        id=request_id,
        inputs=inputs,
        input_datatypes=datatypes,
        outputs=_requested_outputs(header.get("outputs")),
        parameters=parameters,
        shared_memory_inputs=shared,
    )


def _split_shared_memory(entries: Any) -> tuple[Any, dict[str, SharedMemoryInput]]:
    """Separate the inputs that live in shared memory (they take no bytes of the body) from the rest."""
    if not isinstance(entries, list):
        return entries, {}
    in_memory = []
    shared: dict[str, SharedMemoryInput] = {}
    for entry in entries:
        params = entry.get("parameters") if isinstance(entry, dict) else None
        ref = tensor_ref(str(entry.get("name")), params) if isinstance(params, dict) else None
        if ref is None:
            in_memory.append(entry)
            continue
        name, datatype, shape = entry.get("name"), entry.get("datatype"), entry.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str) or not _is_shape(shape):
            raise CodecError(f"shared memory input {name!r} needs a name, a datatype and a shape")
        if name in shared:
            raise CodecError(f"input '{name}' appears more than once")
        shared[name] = SharedMemoryInput(datatype, tuple(shape), ref)
    return in_memory, shared


def _is_shape(shape: Any) -> bool:
    return isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)


def _check_entries(entries: Any, limits: Limits) -> None:
    """Apply the limits to the declared inputs; malformed entries are left to the codec's errors."""
    if not isinstance(entries, list):
        return
    limits.check_input_count(len(entries))
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("shape"), list):
            limits.check_tensor(str(entry.get("name")), str(entry.get("datatype")), entry["shape"])


def _requested_outputs(entries: Any) -> list[RequestedOutput] | None:
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise InvalidArgument("'outputs' must be a list")
    outputs = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InvalidArgument(f"outputs[{index}] must be an object with a 'name'")
        params = entry.get("parameters") or {}
        if not isinstance(params, dict):
            raise InvalidArgument(f"output '{entry['name']}': 'parameters' must be a JSON object")
        binary = params.get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise InvalidArgument(f"output '{entry['name']}': binary_data must be true or false")
        classification = params.get("classification", 0)
        if isinstance(classification, bool) or not isinstance(classification, int) or classification < 0:
            raise InvalidArgument(f"output '{entry['name']}': classification must be a non-negative integer")
        outputs.append(RequestedOutput(entry["name"], binary, classification, tensor_ref(entry["name"], params)))
    return outputs


def encode_infer_response(response: InferenceResponse) -> tuple[bytes, int | None]:
    """Serialise a response; returns the body and the JSON header length when binary follows."""
    blobs: list = []
    header: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        header["id"] = response.id
    if response.parameters:
        header["parameters"] = response.parameters
    try:
        # An output written to shared memory is only described: Triton's C++ HTTP client (perf_analyzer)
        # expects binary_data_size in any output that has parameters, so it gets none.
        header["outputs"] = [
            write_tensor(out.name, out.data, out.datatype, out.binary, blobs)
            if out.shared_memory is None
            else {"name": out.name, "datatype": out.datatype, "shape": list(out.data.shape)}
            for out in response.outputs
        ]
    except CodecError as exc:
        raise InvalidArgument(str(exc)) from None
    return join_body(header, blobs)


__all__ = ["Inflater", "decode_infer_request", "decompress", "encode_infer_response"]
