#!/usr/bin/env bash
# CI step: compile the CUDA code on a GPU-less machine so a broken .cu never lands, then
# load the CUDA-built extension (its CPU kernels run without a GPU) and run the CPU
# tests against it. torch 2.14.1+cu130 from local wheels, nvcc 13.0, TORCH_CUDA_ARCH_LIST=9.0.
# Builds into a temporary directory: the in-place CPU build is left alone. The package with
# the CUDA-built library is left in build/ci-torch-2.14 for scripts/ci_engines.sh (the
# engines pin torch 2.14), so the extension is compiled once.
#
# Usage: scripts/ci_cuda_compile.sh [--prepare] [VENV_DIR]
#   VENV_DIR   default: .venv-cuda in the repo, made if missing, else reused
#   --prepare  only make the venv (.ci/run does it in the background, early)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prepare=0
if [[ "${1:-}" == --prepare ]]; then prepare=1; shift; fi
VENV="${1:-$ROOT/.venv-cuda}"
PY="$VENV/bin/python"

if [[ ! -x "$PY" ]]; then
  python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
  # A failed install leaves no venv behind (the next run would take it for a made one).
  "$VENV/bin/pip" install --quiet torch==2.14.1 numpy pytest ninja setuptools wheel ||
    { rm -rf "$VENV"; exit 1; }
fi
# cuobjdump and the nvdisasm it runs, for benchmarks/sass_report.py (tests/test_sass_report.py:
# SASS budgets, no GPU).
purelib="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[[ -x "$purelib/nvidia/cu13/bin/cuobjdump" && -x "$purelib/nvidia/cu13/bin/nvdisasm" ]] ||
  "$VENV/bin/pip" install --quiet nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm ||
  echo "no cuobjdump/nvdisasm: tests/test_sass_report.py will skip its report"
"$PY" -c 'import torch, sys; assert torch.version.cuda, "need a CUDA build of torch"; print("torch", torch.__version__, "cuda", torch.version.cuda)'
((prepare)) && exit 0

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda-13.0}"
export PATH="$CUDA_HOME/bin:$PATH"
# The cu13 wheels ship the CUDA library headers (cuRAND, cuBLAS...) torch's headers use.
export CPATH="$SITE/nvidia/cu13/include${CPATH:+:$CPATH}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
export FP8_DUMMY_CUDA=1
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"

OUT="$(mktemp -d "${TMPDIR:-/tmp}/fp8_dummy_cuda_build.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
cd "$ROOT"
start=$(date +%s)
if ! "$PY" setup.py build_ext --build-temp "$OUT/temp" --build-lib "$OUT/lib" > "$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40
  echo "CUDA build FAILED (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"
  exit 1
fi
so="$(ls "$OUT"/lib/fp8_dummy/_C*.so)"
echo "compiled in $(( $(date +%s) - start )) s: $(basename "$so") (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"

# The device headers are torch-free: a consumer's kernel, nvcc alone.
bash "$ROOT/scripts/ci_cuda_consumer.sh"
echo "torch-free device headers: consumer kernel compiled with nvcc alone"

# Smoke test: the package from the source tree with the CUDA-built library in it.
PKG="$ROOT/build/ci-torch-2.14"
rm -rf "$PKG" && mkdir -p "$PKG"
cp -r fp8_dummy "$PKG/"
rm -f "$PKG"/fp8_dummy/_C*.so
cp "$so" "$PKG/fp8_dummy/"
cp -r tests include csrc scripts benchmarks pyproject.toml "$PKG/"
cd "$PKG"
# The test extension against the CUDA-built library (its roofline compiled by nvcc too).
bash tests/ext/build.sh "$PY"
# (A build without CUDA registers CUDA kernels too, ones that raise: ask the build itself.)
"$PY" -c 'import fp8_dummy; info = fp8_dummy.build_info(); assert info["cuda"], info; print("CUDA kernels built:", info)'
# PYTHONPATH: the fresh processes some tests start import this package too.
PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -p no:cacheprovider tests/test_headers_philox.py tests/test_init_cuda_emulator.py tests/test_headers_standalone.py \
  tests/test_init_cuda.py tests/test_stateless_cpu.py tests/test_stateless_api.py tests/test_stateless_cuda.py \
  tests/test_stateless_distributed.py tests/test_init_many_cuda_emulator.py tests/test_init_many_cpu.py tests/test_init_many_cuda.py \
  tests/test_random_bytes_cpu.py tests/test_random_bytes_cuda.py \
  tests/test_init_cuda_emulator_contiguous_temp.py tests/test_init_cuda_contiguous_temp.py \
  tests/test_engines_trtllm.py tests/test_proof.py tests/test_proof_faults.py \
  tests/test_conversion_facts.py tests/test_sass_report.py
