#!/usr/bin/env bash
# Builds .device/ on a machine with the package registries: what the GPU checks
# (benchmarks/device_check.sh) need on the device machine beyond its image.
#
# The device machine is offline, runs Python 3.12, and already has torch with CUDA, numpy, ONNX
# Runtime, OpenCV, Pillow, grpcio, pytest, hypothesis and more (the device tool's KINDS.md). So the
# kit carries:
#   - site.tar.xz: Ferry's other dependencies, and tritonclient's for the tests, installed for
#     CPython 3.12 from cp312 wheels at the versions installed in this environment (the ones its
#     tests passed with). grpcio and protobuf come too, since Ferry's generated code needs protobuf
#     6.31+. One xz archive of the installed files is a quarter smaller than the wheels;
#   - perf_analyzer, the C++ client: the binary bundled by tritonclient 2.41.1, with the
#     libcudart.so.12 and libb64.so.0d it loads.
# Swagger UI's 25 MB of assets stay behind: the device call carries at most 64 MiB with the
# working tree. device_check.sh stands in an empty package for them; /docs is not exercised there.
#
#   bash benchmarks/device_kit.sh      # then: the device tool's run, carry [".device"],
#                                      # command "bash benchmarks/device_check.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
KIT=.device
PYTHON=${PYTHON:-python3}
# the device image's Python (another only to try the kit on a machine without a GPU)
DEVICE_PYTHON=${DEVICE_PYTHON:-3.12}
# Ferry's dependencies (pyproject.toml) and test plugins that the device image lacks or may hold
# in an older version, with the dependencies they bring.
NAMES=(fastapi starlette uvicorn httptools pydantic pydantic_core pydantic-settings python-dotenv
  annotated-types typing-inspection orjson msgspec pyclipper shapely python-multipart
  opentelemetry-api opentelemetry-sdk opentelemetry-semantic-conventions grpcio protobuf
  tritonclient python-rapidjson geventhttpclient gevent greenlet zope.event zope.interface brotli
  pytest-asyncio)
PLATFORMS=()
for platform in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 any; do
  PLATFORMS+=(--platform "$platform")
done
download() {
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$DEVICE_PYTHON" --implementation cp \
    "${PLATFORMS[@]}" "$@"
}

pinned=$("$PYTHON" - "${NAMES[@]}" <<'EOF'
import sys
from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in sys.argv[1:]))
EOF
)
rm -rf "$KIT"
mkdir -p "$KIT/pa"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# shellcheck disable=SC2086  # one word per requirement
download -d "$scratch/whl" $pinned
"$PYTHON" -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version "$DEVICE_PYTHON" --implementation cp \
  "${PLATFORMS[@]}" --target "$scratch/site" "$scratch"/whl/*.whl
tar -C "$scratch/site" -cJf "$KIT/site.tar.xz" .

download -d "$scratch" tritonclient==2.41.1 nvidia-cuda-runtime-cu12==12.9.79
unzip -p "$scratch"/tritonclient-2.41.1-*.whl tritonclient-2.41.1.data/data/bin/perf_analyzer | xz -9 >"$KIT/pa/perf_analyzer.xz"
unzip -p "$scratch"/nvidia_cuda_runtime_cu12-*.whl nvidia/cuda_runtime/lib/libcudart.so.12 >"$KIT/pa/libcudart.so.12"
(cd "$scratch" && apt-get download -q libb64-0d >/dev/null 2>&1)
dpkg-deb --fsys-tarfile "$scratch"/libb64-0d_*.deb | tar -x -O ./usr/lib/x86_64-linux-gnu/libb64.so.0d >"$KIT/pa/libb64.so.0d"

tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
kit=$(du -sb "$KIT" | cut -f1)
echo "kit $((kit / 1024 / 1024)) MiB + working tree $((tree / 1024 / 1024)) MiB (the device call carries 64 MiB at most)"
if ((kit + tree > 64 * 1024 * 1024)); then
  echo "too large to carry" >&2
  exit 1
fi
