"""Cache keys: a digest of the loaded model and of every request field that changes the answer.

The model counts by its identity as loaded (name, version and load generation, see
``ModelVersion.identity``), not by name and version alone: a model file replaced under the same
version and reloaded is a new load, so the old model's answers are never served for it.

Inputs count by datatype, shape and bytes; encoded images by their encoded bytes, so the same image
sent again hits before it is decoded. Parameters that only change how or when the answer is
delivered (priority, timeout, binary output) are left out; any other parameter is part of the key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ferry_client.codec import tensor_to_bytes
from ferry_client.codec.datatypes import v2_datatype

from ..types import InferenceRequest

DELIVERY_PARAMETERS = frozenset({"priority", "timeout", "binary_data_output"})


def request_key(model: str, request: InferenceRequest) -> bytes:
    """The key of an inference request to the model loaded as ``model`` (its identity) (inputs
    already decoded from the wire, images still encoded)."""
    digest = _start(model, "infer")
    for name in sorted(request.inputs):
        array = request.inputs[name]
        datatype = request.input_datatypes.get(name) or v2_datatype(array.dtype)
        _add(digest, name, datatype, ",".join(map(str, array.shape)))
        _add_bytes(digest, memoryview(tensor_to_bytes(np.asarray(array), datatype)))
    outputs = sorted((o.name, o.classification) for o in request.outputs) if request.outputs is not None else None
    _add(digest, repr(outputs), _parameters(request.parameters))
    return digest.digest()


def images_key(model: str, task: str, images: Iterable[bytes], options: Mapping[str, Any]) -> bytes:
    """The key of a /classify or /detect call to the model loaded as ``model``: its encoded images
    and its options."""
    digest = _start(model, task)
    _add(digest, _parameters(options))
    for image in images:
        _add_bytes(digest, memoryview(image))
    return digest.digest()


def _start(model: str, kind: str) -> Any:
    digest = hashlib.blake2b(digest_size=32)
    _add(digest, model, kind)
    return digest


def _add(digest: Any, *parts: str) -> None:
    for part in parts:
        _add_bytes(digest, memoryview(part.encode("utf-8")))


def _add_bytes(digest: Any, data: memoryview) -> None:
    digest.update(data.nbytes.to_bytes(8, "little"))  # length-prefixed: no two sequences collide by joining
    digest.update(data)


def _parameters(parameters: Mapping[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in parameters.items() if k not in DELIVERY_PARAMETERS and v is not None))
