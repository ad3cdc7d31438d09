#!/usr/bin/env bash
# CI step: fp8_dummy against the serving engines' own code, on the CPU. Installs vLLM
# 0.33.0, vLLM 0.30.0 and SGLang 0.5.23 (wheels from PyPI) with --no-deps into target
# directories, plus the pinned packages their model loaders import (scripts/engines/*.txt),
# never touching torch; then runs tests/test_engines_vllm.py once per vLLM (with vLLM 0.33
# also tests/test_engines_vllm_invariant.py, whose gloo workers import vLLM in 1, 2 and 4
# processes, and tests/test_engines_vllm_invariant_models.py: whole models at TP=1 and 2)
# and tests/test_engines_sglang.py, each in one process (an engine import costs 20-40 s).
#
# Usage: scripts/ci_engines.sh [--prepare] [PKG_DIR]
#   --prepare  only install the engines (.ci/run does it in the background, early)
#   PKG_DIR   fp8_dummy built against the interpreter's torch, with tests/ and
#             pyproject.toml (default: build/ci-torch-2.14, left by ci_cuda_compile.sh;
#             built here, CPU only, if missing)
#   FP8_DUMMY_ENGINES_PY   the interpreter (default: .venv-cuda/bin/python, torch 2.14.1)
#   FP8_DUMMY_ENGINES      which engines (default: "vllm-0.33.0 vllm-0.30.0 sglang-0.5.23";
#                          vllm-0.28.0 is also pinned), one test process each
#   FP8_DUMMY_CACHE        cache root (default: ~/.cache/fp8_dummy): engines/<lock>-<hash>/
#                          holds each installed target (reused while its lock file is
#                          unchanged), pip/ the downloaded wheels
set -euo pipefail
shopt -s inherit_errexit  # a failed install inside $(target ...) stops the script

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prepare=0
if [[ "${1:-}" == --prepare ]]; then prepare=1; shift; fi
PKG="${1:-$ROOT/build/ci-torch-2.14}"
PY="${FP8_DUMMY_ENGINES_PY:-$ROOT/.venv-cuda/bin/python}"
CACHE="${FP8_DUMMY_CACHE:-$HOME/.cache/fp8_dummy}"
LOCKS="$ROOT/scripts/engines"
start=$(date +%s)

if [[ ! -x "$PY" ]]; then
  echo "ci_engines: no interpreter at $PY (scripts/ci_cuda_compile.sh makes .venv-cuda)" >&2
  exit 1
fi
"$PY" -c 'import torch, sys
v = torch.__version__.split("+")[0]
sys.exit(0 if v.startswith("2.14.") else f"ci_engines: the engines pin torch 2.14, this is {v}")'

# target LOCKNAME: the directory holding that lock file's packages, installed if missing.
target() {
  local lock="$LOCKS/$1.txt" key dir
  key="$( (cat "$lock"; "$PY" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-12)"
  dir="$CACHE/engines/$1-$key"
  if [[ ! -f "$dir/.complete" ]]; then
    echo "ci_engines: installing $1 into $dir" >&2
    rm -rf "$dir.tmp"
    "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
      --cache-dir "$CACHE/pip" --target "$dir.tmp" -r "$lock" >&2
    rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.complete"
    find "$CACHE/engines" -maxdepth 1 -name "$1-*" ! -name "$1-$key" -exec rm -rf {} + # stale
  fi
  echo "$dir"
}
engines=(${FP8_DUMMY_ENGINES:-vllm-0.33.0 vllm-0.30.0 sglang-0.5.23})
paths=()
for engine in "${engines[@]}"; do
  dir="$(target "$engine")"
  if [[ "$engine" == vllm-* || "$engine" == sglang-* ]]; then
    # the vLLMs share one dependency directory; SGLang's model-parallel set-up imports its
    # sampler, whose imports (openai, partial_json_parser...) that directory has: after its own
    deps="$(target vllm-deps)"
    dir="$dir:$deps"
  fi
  paths+=("$dir")
done
echo "ci_engines: engines ready in $(( $(date +%s) - start )) s"
((prepare)) && exit 0

# fp8_dummy for this torch: the CUDA compile job's package, else a CPU-only build here.
if ! ls "$PKG"/fp8_dummy/_C*.so > /dev/null 2>&1; then
  echo "ci_engines: building fp8_dummy (CPU only) for $("$PY" -c 'import torch; print(torch.__version__)')"
  mkdir -p "$ROOT/build"  # a fresh clone has none
  (cd "$ROOT" && FP8_DUMMY_CUDA=0 MAX_JOBS="${MAX_JOBS:-$(nproc)}" "$PY" setup.py build_ext \
    --build-temp "$ROOT/build/engines-temp" --build-lib "$ROOT/build/engines-lib" > "$ROOT/build/engines-build.log" 2>&1) ||
    { tail -n 30 "$ROOT/build/engines-build.log"; exit 1; }
  rm -rf "$PKG" && mkdir -p "$PKG"
  cp -r "$ROOT/fp8_dummy" "$ROOT/tests" "$ROOT/pyproject.toml" "$PKG/"
  rm -f "$PKG"/fp8_dummy/_C*.so
  cp "$ROOT"/build/engines-lib/fp8_dummy/_C*.so "$PKG/fp8_dummy/"
fi
# The current Python sources and tests (the library stays the one built for this torch).
find "$PKG/fp8_dummy" -name '*.py' -delete
(cd "$ROOT" && find fp8_dummy -name '*.py' -exec cp --parents {} "$PKG/" \;)
rm -rf "$PKG/tests" && cp -r "$ROOT/tests" "$ROOT/pyproject.toml" "$PKG/"

cd "$PKG"
status=0
for i in "${!engines[@]}"; do
  engine="${engines[$i]}" t0=$(date +%s)
  tests=(tests/test_engines_vllm.py)
  # vLLM 0.33's parallel layers in 1, 2 and 4 gloo processes, its model classes, MTP draft
  # classes and EAGLE-3 draft class in 1 and 2 (fp8_dummy_invariant, fp8_dummy_realistic), and
  # its own loader reading the exports, and DeepSeek-V4's GPU MTP class and Inkling's MTP class
  # built (~7 min).
  [[ "$engine" == vllm-0.33.* ]] &&
    tests+=(tests/test_engines_vllm_invariant.py tests/test_engines_vllm_invariant_models.py
      tests/test_engines_vllm_mtp.py tests/test_engines_vllm_eagle3.py
      tests/test_engines_vllm_exports.py tests/test_engines_vllm_deepseek_v4_mtp.py
      tests/test_engines_vllm_deepseek_v4_expert_dtype.py tests/test_engines_vllm_inkling_mtp.py)
  [[ "$engine" == sglang-* ]] && tests=(tests/test_engines_sglang.py
    tests/test_engines_sglang_realistic.py tests/test_engines_sglang_mtp.py
    tests/test_engines_sglang_eagle3.py)
  echo "== $engine"
  env -u FP8_DUMMY_VLLM -u FP8_DUMMY_SGLANG -u VLLM_PLUGINS -u SGLANG_PLUGINS \
    PYTHONPATH="$PKG:${paths[$i]}" FP8_DUMMY_REQUIRE_ENGINES=1 \
    "$PY" -m pytest -q -p no:cacheprovider -rs "${tests[@]}" || status=1
  echo "== $engine: $(( $(date +%s) - t0 )) s"
done
echo "ci_engines: done in $(( $(date +%s) - start )) s, status $status"
exit $status
