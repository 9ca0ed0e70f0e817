"""gRPC wire format <-> data-plane types: ModelInferRequest / ModelInferResponse messages."""

from __future__ import annotations

from ferry_client.codec import CodecError, tensor_from_proto, tensor_to_bytes
from ferry_client.codec.parameters import parameter_value, set_parameter
from ferry_client.protocol import grpc_service_pb2 as pb

from ..errors import InvalidArgument
from ..types import InferenceRequest, InferenceResponse, RequestedOutput
from .limits import Limits

DEFAULT_LIMITS = Limits()


def decode_infer_request(message: pb.ModelInferRequest, limits: Limits = DEFAULT_LIMITS) -> InferenceRequest:
    """Decode inputs from raw_input_contents (zero-copy) or typed contents, within ``limits``."""
    limits.check_input_count(len(message.inputs))
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise InvalidArgument(
            f"raw_input_contents holds {len(raw)} entries but the request has {len(message.inputs)} inputs"
        )
    inputs = {}
    datatypes = {}
    try:
        for index, tensor in enumerate(message.inputs):
            if tensor.name in inputs:
                raise InvalidArgument(f"input '{tensor.name}' appears more than once")
            limits.check_tensor(tensor.name, tensor.datatype, list(tensor.shape))
            inputs[tensor.name] = tensor_from_proto(tensor, raw, index)
            datatypes[tensor.name] = tensor.datatype
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
            outputs.append(RequestedOutput(out.name, True, classification))
    return InferenceRequest(
        model_name=message.model_name,
        model_version=message.model_version,
        id=message.id,
        inputs=inputs,
        input_datatypes=datatypes,
        outputs=outputs,
        parameters={key: parameter_value(value) for key, value in message.parameters.items()},
    )


def encode_infer_response(response: InferenceResponse) -> pb.ModelInferResponse:
    """Encode outputs as raw_output_contents, the form tritonclient expects."""
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], key, value)
    for out in response.outputs:
        tensor = message.outputs.add(name=out.name, datatype=out.datatype)
        tensor.shape.extend(out.data.shape)
        message.raw_output_contents.append(bytes(tensor_to_bytes(out.data, out.datatype)))
    return message
