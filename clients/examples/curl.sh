#!/usr/bin/env bash
# Every REST endpoint of Ferry with curl. Usage:
#   FERRY_HTTP=127.0.0.1:8000 FERRY_METRICS=127.0.0.1:8002 ./curl.sh DIGIT.png SCENE.png
# Each call uses --fail-with-body, so the script stops at the first error and prints the server's message.
set -euo pipefail
HTTP="http://${FERRY_HTTP:-127.0.0.1:8000}"
METRICS="http://${FERRY_METRICS:-127.0.0.1:8002}"
DIGIT="${1:?a digit image (PNG/JPEG) for /classify}"
SCENE="${2:?a scene image for /detect}"
CURL=(curl -sS --fail-with-body)

show() { echo "== $*" >&2; }

show "health: live and ready (200 = yes, 503 = not ready)"
"${CURL[@]}" -o /dev/null -w "%{http_code}\n" "$HTTP/v2/health/live"
"${CURL[@]}" -o /dev/null -w "%{http_code}\n" "$HTTP/v2/health/ready"

show "server metadata: name, version, extensions"
"${CURL[@]}" "$HTTP/v2"; echo

show "model readiness, metadata (tensors) and config (config.pbtxt as JSON)"
"${CURL[@]}" -o /dev/null -w "%{http_code}\n" "$HTTP/v2/models/simple/ready"
"${CURL[@]}" "$HTTP/v2/models/simple"; echo
"${CURL[@]}" "$HTTP/v2/models/simple/versions/1"; echo
"${CURL[@]}" "$HTTP/v2/models/simple/config"; echo

show "inference, JSON tensors: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1"
"${CURL[@]}" -H 'Content-Type: application/json' "$HTTP/v2/models/simple/infer" -d '{
  "id": "curl-1",
  "inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}
  ],
  "outputs": [{"name": "OUTPUT0"}]
}'; echo

show "classification extension: top-3 classes of the digits model for a blank 28x28 image"
ZEROS="$(printf '0,%.0s' $(seq 783))0"
"${CURL[@]}" -H 'Content-Type: application/json' "$HTTP/v2/models/digits/infer" -d "{
  \"inputs\": [{\"name\": \"input\", \"shape\": [1, 1, 28, 28], \"datatype\": \"FP32\", \"data\": [$ZEROS]}],
  \"outputs\": [{\"name\": \"logits\", \"parameters\": {\"classification\": 3}}]
}"; echo

show "image endpoints: post the file as the body, or several as multipart 'images' fields"
"${CURL[@]}" --data-binary "@$DIGIT" -H 'Content-Type: application/octet-stream' \
  "$HTTP/v2/models/digits/classify?top_k=3"; echo
"${CURL[@]}" -F "images=@$DIGIT" -F "images=@$DIGIT" "$HTTP/v2/models/digits/classify"; echo
"${CURL[@]}" --data-binary "@$SCENE" -H 'Content-Type: application/octet-stream' \
  "$HTTP/v2/models/digit_detector/detect?score_threshold=0.4"; echo

show "statistics: every model, then one"
"${CURL[@]}" "$HTTP/v2/models/stats" > /dev/null && echo ok
"${CURL[@]}" "$HTTP/v2/models/simple/stats"; echo

show "repository: index, unload, load (explicit or poll mode)"
"${CURL[@]}" -X POST "$HTTP/v2/repository/index" -d '{"ready": true}'; echo
"${CURL[@]}" -X POST "$HTTP/v2/repository/models/simple_fp32/unload" -d '{}'; echo
"${CURL[@]}" -X POST "$HTTP/v2/repository/models/simple_fp32/load" -d '{}'; echo
"${CURL[@]}" -X POST "$HTTP/v2/repository/models/simple_fp32/load" \
  -d '{"parameters": {"config": "{\"max_batch_size\": 4, \"dynamic_batching\": {}}"}}'; echo

show "Prometheus metrics (Triton's names) on the metrics port"
"${CURL[@]}" "$METRICS/metrics" | grep -E '^nv_inference_request_success\{model="simple"' || true
