#!/usr/bin/env bash
# Ferry's gRPC service with grpcurl (https://github.com/fullstorydev/grpcurl: a release binary, or
# `go install github.com/fullstorydev/grpcurl/cmd/grpcurl@latest`; it is not packaged in Debian or PyPI).
# The server has no reflection service, so grpcurl reads the service from protos/grpc_service.proto.
#   FERRY_GRPC=127.0.0.1:8001 ./grpcurl.sh
# tests/integration/test_examples.py replays every call below (same method, same JSON) with Python's grpc.
set -euo pipefail
cd "$(dirname "$0")/../.."
GRPC="${FERRY_GRPC:-127.0.0.1:8001}"
G=(grpcurl -plaintext -import-path protos -proto grpc_service.proto)

"${G[@]}" "$GRPC" inference.GRPCInferenceService/ServerLive
"${G[@]}" "$GRPC" inference.GRPCInferenceService/ServerReady
"${G[@]}" "$GRPC" inference.GRPCInferenceService/ServerMetadata
"${G[@]}" -d '{"name": "simple"}' "$GRPC" inference.GRPCInferenceService/ModelReady
"${G[@]}" -d '{"name": "simple"}' "$GRPC" inference.GRPCInferenceService/ModelMetadata
"${G[@]}" -d '{"name": "simple"}' "$GRPC" inference.GRPCInferenceService/ModelConfig
"${G[@]}" -d '{"name": "simple"}' "$GRPC" inference.GRPCInferenceService/ModelStatistics
"${G[@]}" -d '{"ready": true}' "$GRPC" inference.GRPCInferenceService/RepositoryIndex
"${G[@]}" -d '{"model_name": "simple", "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "contents": {"int_contents": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]}}, {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "contents": {"int_contents": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}}]}' "$GRPC" inference.GRPCInferenceService/ModelInfer
"${G[@]}" -d '{"model_name": "simple_fp32"}' "$GRPC" inference.GRPCInferenceService/RepositoryModelUnload
"${G[@]}" -d '{"model_name": "simple_fp32"}' "$GRPC" inference.GRPCInferenceService/RepositoryModelLoad
