"""The floor of a gRPC intake: grpcio's aio server alone, configured as Ferry's, answering
host_path.py's ModelInfer with a fixed answer (``host_path.py --grpc-floor``).

What it does for a request is what no gRPC intake can skip: grpcio receives the message (with
Ferry's channel options and uvloop), Ferry's wire scan finds the tensor's bytes, and one copy puts
them in resident memory (an intake's arena slot). No admission, limits, guard, hand-off or
model. So an intake's CPU per request minus this one's is what Ferry adds to grpcio.

    python grpc_floor.py GRPC_PORT
"""

import sys

import grpc
import numpy as np
import uvloop

from ferry.api.grpc_limits import GrpcLimits
from ferry.api.grpc_wire import parse_infer_request
from ferry_client.protocol import grpc_service_pb2 as pb
from ferry_client.protocol import model_config_pb2 as mc

SERVICE = "/inference.GRPCInferenceService/"
MODEL = "host_path"
MAX_MESSAGE_BYTES = 64 << 20


def _answers() -> dict[str, bytes]:
    """The fixed answers of every call perf_analyzer makes, serialised once."""
    metadata = pb.ModelMetadataResponse(name=MODEL, versions=["1"], platform="onnxruntime_onnx")
    metadata.inputs.add(name="input", datatype="FP32", shape=[-1, 3, 224, 224])
    metadata.outputs.add(name="output", datatype="FP32", shape=[-1, 1000])
    config = mc.ModelConfig(name=MODEL, platform="onnxruntime_onnx", max_batch_size=128)
    config.input.add(name="input", data_type=mc.TYPE_FP32, dims=[3, 224, 224])
    config.output.add(name="output", data_type=mc.TYPE_FP32, dims=[1000])
    config.dynamic_batching.SetInParent()
    infer = pb.ModelInferResponse(model_name=MODEL, model_version="1")
    infer.outputs.add(name="output", datatype="FP32", shape=[1, 1000])
    infer.raw_output_contents.append(bytes(4000))
    return {
        "ServerLive": pb.ServerLiveResponse(live=True).SerializeToString(),
        "ServerReady": pb.ServerReadyResponse(ready=True).SerializeToString(),
        "ModelReady": pb.ModelReadyResponse(ready=True).SerializeToString(),
        "ServerMetadata": pb.ServerMetadataResponse(name="grpc-floor", version="0").SerializeToString(),
        "ModelMetadata": metadata.SerializeToString(),
        "ModelConfig": pb.ModelConfigResponse(config=config).SerializeToString(),
        "ModelInfer": infer.SerializeToString(),
    }


class Floor(grpc.GenericRpcHandler):
    """Every method as bytes in, bytes out; ModelInfer counted for ModelStatistics."""

    def __init__(self) -> None:
        self.answers = _answers()
        self.slot = np.empty(3 * 224 * 224 * 4, np.uint8)  # resident: written by every request
        self.answered = 0

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = details.method.removeprefix(SERVICE)
        if method == "ModelInfer":
            return grpc.unary_unary_rpc_method_handler(self.infer)
        if method == "ModelStatistics":
            return grpc.unary_unary_rpc_method_handler(self.statistics)
        answer = self.answers.get(method)
        if answer is None:
            return None

        async def fixed(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return answer

        return grpc.unary_unary_rpc_method_handler(fixed)

    async def infer(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        received = parse_infer_request(request)
        self.slot[:] = np.frombuffer(received.raw[0], np.uint8)
        self.answered += 1
        return self.answers["ModelInfer"]

    async def statistics(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        stats = pb.ModelStatisticsResponse()
        model = stats.model_stats.add(name=MODEL, version="1")
        model.inference_count = model.execution_count = self.answered
        model.inference_stats.success.count = self.answered
        return stats.SerializeToString()


async def serve(port: int) -> None:
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        *GrpcLimits().channel_options(),
    ]
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers((Floor(),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
