#!/usr/bin/env bash
# CI step for the CUDA compile job: compile tests/consumers/cmake/device_consumer.cu, a
# consumer's own kernel using the torch-free device headers (include/fp8_dummy/cuda/),
# with nvcc alone (no torch), for sm_80 (software FP8 conversion) and sm_90 (hardware);
# run it (without a GPU it says so and exits 0; with one it compares device and host).
#   CUDA_HOME  default /usr/local/cuda-13.0, else nvcc from PATH
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc="${CUDA_HOME:-/usr/local/cuda-13.0}/bin/nvcc"
[[ -x "$nvcc" ]] || nvcc="$(command -v nvcc)"
out="$(mktemp -d "${TMPDIR:-/tmp}/fp8_dummy_cuda_consumer.XXXXXX")"
trap 'rm -rf "$out"' EXIT
"$nvcc" -std=c++17 -Werror all-warnings -Xcompiler=-Wall,-Wextra,-Werror -I include \
  -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  tests/consumers/cmake/device_consumer.cu -o "$out/device_consumer"
"$out/device_consumer"
