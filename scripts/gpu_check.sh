#!/usr/bin/env bash
# The GPU check of issues #3 and #7, to run as is on a GPU machine (no network
# needed): builds the extension in place for the local GPU, runs the GPU tests (and the
# CPU emulator / Philox tests), then the GPU benchmarks (per tensor, whole model).
# Writes into OUTDIR: build.log, pytest.log, junit.xml, bench_cuda.json, table.txt,
# bench_model.json, model_table.txt, summary.txt. About 4-5 minutes on an H200 with 16
# cores. Exit status: 0 all passed, 1 a step failed, 2 no GPU.
#
# Usage: scripts/gpu_check.sh OUTDIR      (PYTHON=... to pick the interpreter)
set -euo pipefail

OUT="${1:?usage: scripts/gpu_check.sh OUTDIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT"
: > "$OUT/summary.txt"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

# A GPU-less machine must fail fast and clearly, never hang.
if ! timeout 60 "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)'; then
  note "gpu_check: no GPU (torch.cuda.is_available() is False, or torch failed to load)"
  exit 2
fi
if ! "$PY" -c 'import setuptools, pytest' 2> /dev/null; then
  note "gpu_check: $PY needs setuptools and pytest (numpy for the emulator tests)"
  exit 1
fi
# torch builds with ninja when it finds it (pip package or binary), slowly without.
"$PY" -c 'import ninja' 2> /dev/null || command -v ninja > /dev/null ||
  note "gpu_check: warning: no ninja, the build will be slow"
arch="$("$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability(0))')"
"$PY" -c 'import torch; p = torch.cuda.get_device_properties(0); print(f"torch {torch.__version__}, {p.name}, {p.multi_processor_count} SMs")' | tee -a "$OUT/summary.txt"

export TORCH_CUDA_ARCH_LIST="$arch" FP8_DUMMY_CUDA=1 MAX_JOBS="${MAX_JOBS:-16}"
# The in-place build is imported from the source tree (benchmarks/ is not on sys.path).
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [[ -z "${CUDA_HOME:-}" ]] && ! command -v nvcc > /dev/null; then
  export CUDA_HOME=/usr/local/cuda
  export PATH="$CUDA_HOME/bin:$PATH"
fi
# cu13 wheels carry CUDA library headers a bare toolkit may lack.
site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[[ -d "$site/nvidia/cu13/include" ]] && export CPATH="$site/nvidia/cu13/include${CPATH:+:$CPATH}"

status=0
start=$(date +%s)
if timeout 240 "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  note "build (TORCH_CUDA_ARCH_LIST=$arch): ok in $(( $(date +%s) - start )) s"
else
  note "build: FAILED, see build.log"; tail -30 "$OUT/build.log"; exit 1
fi

start=$(date +%s)
if timeout 300 "$PY" -m pytest -q -p no:cacheprovider --junitxml="$OUT/junit.xml" \
    tests/test_reference_cuda.py tests/test_init_many_cuda.py tests/test_reference_cuda_emulator.py \
    tests/test_init_many_cuda_emulator.py tests/test_init_many_cpu.py tests/test_headers_philox.py \
    tests/test_headers_standalone.py tests/test_stateless_cuda.py tests/test_random_bytes_cuda.py \
    > "$OUT/pytest.log" 2>&1; then
  note "tests: $(tail -n 1 "$OUT/pytest.log") ($(( $(date +%s) - start )) s)"
else
  status=1
  note "tests: FAILED: $(tail -n 1 "$OUT/pytest.log"), see pytest.log"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20 | tee -a "$OUT/summary.txt" || true
fi

start=$(date +%s)
if timeout 180 "$PY" benchmarks/bench_cuda.py --json "$OUT/bench_cuda.json" > "$OUT/table.txt" 2>&1; then
  cat "$OUT/table.txt"
  note "benchmark: ok in $(( $(date +%s) - start )) s"
else
  status=1
  cat "$OUT/table.txt"
  note "benchmark: FAILED"
fi

# The whole-model benchmark of issue #7 (2,002 FP8 tensors; batched init_many_).
start=$(date +%s)
if timeout 240 "$PY" benchmarks/bench_model.py --devices cuda --json "$OUT/bench_model.json" \
    > "$OUT/model_table.txt" 2>&1; then
  cat "$OUT/model_table.txt"
  note "model benchmark: ok in $(( $(date +%s) - start )) s"
else
  status=1
  tail -30 "$OUT/model_table.txt"
  note "model benchmark: FAILED"
fi
exit "$status"
