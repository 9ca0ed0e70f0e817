"""What a response will cost before it is built: refuse one past ``--max-response-bytes``.

A small request can ask for a huge answer (a [1, 60M] tensor back as JSON is gigabytes of text and
Python objects). The estimate is taken from the output arrays before any encoding starts, and the
admitted request reserves the encoding's peak cost against the in-flight byte cap (for JSON the
Python numbers and the text, ~60 bytes a number, not the 8 the size check assumes; for binary
answers every copy alive until the answer is written), so the cap sees the real cost.
"""

from __future__ import annotations

import numpy as np

from ..errors import PayloadTooLarge
from ..types import InferenceResponse
from .admission import Ticket

#: A low estimate of one number written as JSON text ("0.12345678," is 11 bytes; "0," is 2).
JSON_BYTES_PER_ELEMENT = 8
#: What encoding one number as JSON holds at its peak: the list of Python numbers ``tolist`` builds
#: (an 8-byte pointer and a 24-32 byte object each) and the text written from it (up to ~20 bytes).
#: Measured: ~58 bytes for float32, ~36 for int64 (RSS, 4M elements).
JSON_PEAK_BYTES_PER_ELEMENT = 64
#: The same for a BYTES element sent as JSON text: its str object and pointer, plus twice its length.
JSON_PEAK_BYTES_PER_STRING = 64


def estimated_size(response: InferenceResponse, binary_only: bool) -> int:
    """Bytes the encoded outputs will take: raw bytes when sent binary, JSON text otherwise."""
    total = 0
    for out in response.outputs:
        if out.shared_memory is not None:  # written to the client's region, not into the response
            continue
        if binary_only or out.binary or out.data.dtype == object:
            total += out.data.nbytes if out.data.dtype != object else sum(len(v) for v in out.data.reshape(-1))
        else:
            total += out.data.size * JSON_BYTES_PER_ELEMENT
    return total


#: Copies of a binary answer alive at once until it is written: REST, the output array and the
#: encoded body, then the body and what the transport buffers of it.
REST_BINARY_COPIES = 2
#: gRPC: the output array and the message, then the message, its serialised bytes and gRPC core's copy.
GRPC_BINARY_COPIES = 3


def peak_cost(response: InferenceResponse, binary_only: bool, copies: int = REST_BINARY_COPIES) -> int:
    """Bytes encoding the outputs holds at its peak: ``copies`` times the encoded bytes for binary
    outputs; for JSON the Python objects built on the way and the text, far more than the text alone."""
    total = 0
    for out in response.outputs:
        if out.shared_memory is not None:
            continue
        if binary_only or out.binary:
            size = out.data.nbytes if out.data.dtype != object else sum(len(v) for v in out.data.reshape(-1))
            total += copies * size
        elif out.data.dtype == object:
            flat = out.data.reshape(-1)
            total += flat.size * JSON_PEAK_BYTES_PER_STRING + 2 * sum(len(v) for v in flat)
        else:
            total += out.data.size * JSON_PEAK_BYTES_PER_ELEMENT
    return total


def reserve_outputs(inputs: dict[str, np.ndarray], ticket: Ticket) -> int:
    """Count, before the model runs, outputs as large as the inputs: they exist before the answer's
    cost can be known, and a request admitted on its body alone would hold twice what was counted.
    Returns what was counted (``reserve_response`` counts only the rest)."""
    nbytes = sum(array.nbytes for array in inputs.values() if array.dtype != object)
    ticket.reserve(nbytes)
    return nbytes


def reserve_response(
    response: InferenceResponse,
    limit: int,
    ticket: Ticket | None,
    binary_only: bool,
    copies: int = REST_BINARY_COPIES,
    reserved: int = 0,
) -> None:
    """Refuse a response larger than ``limit``; otherwise count its peak cost (``peak_cost``)
    against the in-flight bytes, less ``reserved`` (counted for the outputs before they existed)."""
    size = estimated_size(response, binary_only)
    if size > limit:
        advice = "" if binary_only else "; request outputs with binary_data (the binary tensor extension)"
        raise PayloadTooLarge(
            f"the response would take about {size} bytes, more than the limit of {limit} bytes "
            f"(--max-response-bytes); ask for fewer or smaller outputs{advice}"
        )
    if ticket is not None:
        ticket.reserve(max(0, peak_cost(response, binary_only, copies) - reserved))
