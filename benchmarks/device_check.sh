#!/usr/bin/env bash
# The GPU checks in one call on the device machine, from the repository root, with .device/ (built
# by benchmarks/device_kit.sh) carried: the GPU tests, then benchmarks/gpu_torch.py with
# perf_analyzer as the gRPC client. Everything it writes goes to $OUT: the environment, the tests'
# output, the benchmark's tables and log.
#
# About 8 minutes, well inside one call's 10. TESTS_S and BENCH_S bound the two parts (seconds);
# GPU_TORCH_ARGS replaces the benchmark's settings. Tried end to end on a CPU machine only (see README).
set -uo pipefail
OUT=${OUT:-/tmp/ferry-device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT=$PWD
KIT=$ROOT/.device
if [ ! -f "$KIT/site.tar.xz" ]; then
  echo "no .device/ here: build it with benchmarks/device_kit.sh and carry it" >&2
  exit 2
fi

# unpacked by Python (lzma, tarfile): the image need not have xz
python3 - "$KIT" <<'EOF' || exit 2
import lzma
import os
import sys
import tarfile

kit = sys.argv[1]
with tarfile.open(os.path.join(kit, "site.tar.xz")) as archive:
    archive.extractall("/tmp/ferry-site", filter="data")
os.makedirs("/tmp/ferry-pa", exist_ok=True)
with lzma.open(os.path.join(kit, "pa", "perf_analyzer.xz")) as packed, open("/tmp/ferry-pa/perf_analyzer", "wb") as out:
    out.write(packed.read())
os.chmod("/tmp/ferry-pa/perf_analyzer", 0o755)
EOF
# Swagger UI's assets are not carried (device_kit.sh): an empty package stands in for them
mkdir -p /tmp/ferry-stub/swagger_ui/static && touch /tmp/ferry-stub/swagger_ui/__init__.py
export PYTHONPATH=/tmp/ferry-site:/tmp/ferry-stub:$ROOT/server:$ROOT/clients/python
export LD_LIBRARY_PATH=$KIT/pa${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

{
  date -u
  git -C "$ROOT" log -1 --format='%H %s' 2>/dev/null || echo "(no git history in this copy)"
  nvidia-smi
  nproc
  python3 - <<'EOF'
import sys

import google.protobuf
import grpc
import numpy
import onnxruntime
import torch

print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "grpc", grpc.__version__, "protobuf",
      google.protobuf.__version__, "numpy", numpy.__version__, "onnxruntime", onnxruntime.__version__)
EOF
  /tmp/ferry-pa/perf_analyzer --version 2>&1 | head -3
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

# the modules holding gpu-marked tests (collecting every module would import test-only packages
# the device image lacks)
mapfile -t GPU_TESTS < <(grep -rl --include='test_*.py' 'pytest.mark.gpu' tests | sort)
timeout "${TESTS_S:-200}" python3 -m pytest -q -m gpu -p no:cacheprovider "${GPU_TESTS[@]}" 2>&1 |
  tee "$OUT/gpu-tests.txt"
tests=$?

# shellcheck disable=SC2206  # the settings, one word each
SETTINGS=(${GPU_TORCH_ARGS:---raw-batches 1 32 128 --concurrency 128 --instances 2 --intakes 1 4 8 --duration 1.5 --windows 2})
timeout "${BENCH_S:-330}" python3 benchmarks/gpu_torch.py "${SETTINGS[@]}" --perf-analyzer /tmp/ferry-pa/perf_analyzer \
  --output "$OUT/gpu-torch.md" 2>&1 | tee "$OUT/gpu-torch.log"
bench=$?
echo "tests exit $tests, benchmark exit $bench"
exit $((tests || bench))
