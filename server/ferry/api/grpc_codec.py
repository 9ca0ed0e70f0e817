"""gRPC wire format <-> data-plane types: ModelInferRequest / ModelInferResponse messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ferry_client.codec import CodecError, tensor_from_proto, tensor_to_bytes
from ferry_client.codec.parameters import parameter_value, set_parameter
from ferry_client.protocol import grpc_service_pb2 as pb

from ..errors import InvalidArgument
from ..types import InferenceRequest, InferenceResponse, RequestedOutput, SharedMemoryInput
from .limits import Limits
from .shared_memory import tensor_ref

DEFAULT_LIMITS = Limits()


def decode_infer_request(
    message: pb.ModelInferRequest,
    limits: Limits = DEFAULT_LIMITS,
    raw: Sequence[bytes | memoryview] | None = None,
) -> InferenceRequest:
    """Decode inputs from raw contents (zero-copy: ``raw``, views into the bytes received, else the
    message's ``raw_input_contents``) or typed contents, within ``limits``."""
    limits.check_input_count(len(message.inputs))
    refs = [tensor_ref(tensor.name, _parameters(tensor)) for tensor in message.inputs]
    if raw is None:
        raw = message.raw_input_contents
    in_memory = sum(1 for ref in refs if ref is None)
    if raw and len(raw) != in_memory:
        raise InvalidArgument(
            f"raw_input_contents holds {len(raw)} entries but the request has {in_memory} inputs outside shared memory"
        )
    inputs = {}
    datatypes = {}
    shared: dict[str, SharedMemoryInput] = {}
    raw_index = 0
    try:
        for tensor, ref in zip(message.inputs, refs, strict=True):
            if tensor.name in inputs or tensor.name in shared:
                raise InvalidArgument(f"input '{tensor.name}' appears more than once")
            limits.check_tensor(tensor.name, tensor.datatype, list(tensor.shape))
            if ref is not None:
                shared[tensor.name] = SharedMemoryInput(tensor.datatype, tuple(tensor.shape), ref)
                continue
            inputs[tensor.name] = tensor_from_proto(tensor, raw, raw_index)
            datatypes[tensor.name] = tensor.datatype
            raw_index += 1
    except CodecError as exc:
        raise InvalidArgument(str(exc)) from None
    outputs = None
    if message.outputs:
        outputs = []
        for out in message.outputs:
            classification = (
                parameter_value(out.parameters["classification"]) if "classification" in out.parameters else 0
            )
            if isinstance(classification, bool) or not isinstance(classification, int) or classification < 0:
                raise InvalidArgument(f"output '{out.name}': classification must be a non-negative integer")
            ref = tensor_ref(out.name, _parameters(out))
            outputs.append(RequestedOutput(out.name, True, classification, ref))
    return InferenceRequest(
        model_name=message.model_name,
        model_version=message.model_version,
        id=message.id,
        inputs=inputs,
        input_datatypes=datatypes,
        outputs=outputs,
        parameters=_parameters(message),
        shared_memory_inputs=shared,
    )


def _parameters(message: Any) -> dict[str, Any]:
    parameters = message.parameters
    if not parameters:  # the usual case: a third of the cost of iterating the empty map
        return {}
    return {key: parameter_value(value) for key, value in parameters.items()}


def encode_infer_response(
    response: InferenceResponse, into: pb.ModelInferResponse | None = None
) -> pb.ModelInferResponse:
    """Encode outputs as raw_output_contents, the form tritonclient expects; ``into`` an empty
    message (a stream response's ``infer_response``: placing a built one there would copy it)."""
    message = pb.ModelInferResponse() if into is None else into
    message.model_name, message.model_version, message.id = response.model_name, response.model_version, response.id
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], key, value)
    for out in response.outputs:
        tensor = message.outputs.add(name=out.name, datatype=out.datatype)
        tensor.shape.extend(out.data.shape)
        if out.shared_memory is not None:
            for key, value in out.shared_memory.items():
                set_parameter(tensor.parameters[key], key, value)
            message.raw_output_contents.append(b"")  # keeps raw_output_contents aligned with outputs
            continue
        message.raw_output_contents.append(bytes(tensor_to_bytes(out.data, out.datatype)))
    return message
