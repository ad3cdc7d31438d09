#!/usr/bin/env bash
# CI: the CPU byte-exactness tests on the torch versions users run besides CI's own two
# (the full suite runs on 2.13, the CUDA compile job on 2.14.1):
#   2.11.0  the release wheel (scripts/build_wheels.sh) for that torch, with its CUDA kernels
#           (TORCH_CUDA_ARCH_LIST=9.0): its extensions compile as C++17, as on the GPU machine
#           (torch 2.11.0+cu130), so every .cpp and .cu file is checked as C++17; the wheel is
#           installed and tested as users get it, no compiler (scripts/test_wheel.sh: check,
#           the CUDA kernels registered, TESTS)
#   2.12.0, 2.15.0  CPU builds from source
# For each: a venv with that torch from PyPI (the full wheel, as users install it), the
# extension built into a temporary directory with the setuptools the venv has, then the tests
# of the generator mode (exact, fast and portable CPU paths), the stateless mode and
# opcheck/torch.compile, and one line with the fast path's state and the counts.
#
# The venvs are cached in $FP8_DUMMY_CACHE (default ~/.cache/fp8_dummy) and rebuilt when
# missing or incomplete; warm, the matrix costs the builds and the tests only. Cold, the
# next version's venv is installed (downloads, mostly) while this one builds and tests.
#
# Usage: scripts/ci_torch_matrix.sh [--bench] [VERSION ...]   (default: 2.11.0 2.12.0 2.15.0)
#   --bench  also time 64 Mi float8_e4m3fn on the CPU per version (benchmarks/bench_init.py:
#            the reference new path and init_ in the same run), for benchmarks/RESULTS.md;
#            not in CI (timings do not belong in tests)
set -euo pipefail
shopt -s inherit_errexit  # a failed install inside $(venv_for ...) stops the script

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_venv.sh"  # venv_for
bench=0
if [[ "${1:-}" == --bench ]]; then bench=1; shift; fi
versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || versions=(2.11.0 2.12.0 2.15.0)
# scripts/test_wheel.sh's tests (no compiler needed), then those of the test extension.
TESTS=(tests/test_init_cpu.py tests/test_random_bytes_cpu.py
  tests/test_init_many_cpu.py tests/test_stateless_cpu.py tests/test_stateless_api.py
  tests/test_inplace_semantics.py tests/test_stateless_dtensor.py
  tests/test_init_cpu_contiguous_temp.py tests/test_engines_trtllm.py)
EXT_TESTS=(tests/test_init_cpu_fast_path.py tests/test_init_cpu_fast_path_split.py
  tests/test_init_api.py tests/test_init_cpu_mt19937_jump.py tests/test_headers_philox.py
  tests/test_init_cuda_emulator.py)
summary=()

next=""  # the background install of the next version's venv, stopped if this script stops
trap 'if [[ -n "$next" ]]; then pkill -P "$next" 2> /dev/null; kill "$next" 2> /dev/null; fi' EXIT
for i in "${!versions[@]}"; do
  version="${versions[$i]}"
  start=$(date +%s)
  if [[ -n "$next" ]]; then wait "$next" || { echo "torch $version: VENV INSTALL FAILED"; exit 1; }; fi
  next=""
  venv="$(venv_for "$version")"
  if ((i + 1 < ${#versions[@]})); then
    venv_for "${versions[$((i + 1))]}" > /dev/null &
    next=$!
  fi
  py="$venv/bin/python"
  out="$(mktemp -d "${TMPDIR:-/tmp}/fp8_dummy_torch_$version.XXXXXX")"
  cuda=0
  [[ "$version" == 2.11.* ]] && cuda=1
  (
    cd "$ROOT"
    export FP8_DUMMY_CUDA="$cuda" MAX_JOBS="${MAX_JOBS:-$(nproc)}"
    if ((cuda)); then
      site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
      export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda-13.0}" TORCH_CUDA_ARCH_LIST=9.0
      export PATH="$CUDA_HOME/bin:$PATH"
      export CPATH="$(ls -d "$site"/nvidia/cu1*/include | head -n 1)${CPATH:+:$CPATH}"
    fi
    mkdir -p "$out/pkg"
    if ((cuda)); then
      # The release wheel for this torch, its CUDA kernels for sm_90 (scripts/build_wheels.sh),
      # installed and tested as users get it, no compiler (scripts/test_wheel.sh: TESTS);
      # the test extension's tests below run against its package.
      wheel="$(bash scripts/build_wheels.sh --torch "$version" --archs 9.0 "$out/wheel" \
        2> "$out/build.log" | tail -n 1)" ||
        { tail -n 30 "$out/build.log"; echo "torch $version: WHEEL BUILD FAILED"; exit 1; }
      tail -n 1 "$out/build.log"
      bash scripts/test_wheel.sh "$wheel" "$version" ||
        { echo "torch $version: WHEEL TEST FAILED"; exit 1; }
      (cd "$out/pkg" && "$py" -m zipfile -e "$wheel" . && rm -rf ./*.dist-info ./*startup*)
      cp -r tests include csrc scripts "$out/pkg/"
    else
      if ! "$py" setup.py build_ext --build-temp "$out/temp" --build-lib "$out/lib" \
        > "$out/build.log" 2>&1; then
        grep -E "error|Error" "$out/build.log" | head -30
        echo "torch $version: BUILD FAILED"
        exit 1
      fi
      cp -r fp8_dummy tests include csrc scripts "$out/pkg/"
      rm -f "$out"/pkg/fp8_dummy/_C*.so
      cp "$out"/lib/fp8_dummy/_C*.so "$out/pkg/fp8_dummy/"
    fi
    # The test extension for that library (2.11: its CUDA roofline as C++17 too).
    bash "$out/pkg/tests/ext/build.sh" "$py" > "$out/build-test-ext.log" 2>&1 ||
      { tail -n 30 "$out/build-test-ext.log"; echo "torch $version: TEST EXTENSION BUILD FAILED"; exit 1; }
  ) || exit 1
  cd "$out/pkg"
  info="$("$py" -c 'import fp8_dummy; print(fp8_dummy.cpu_fast_path_info())')"
  set +e
  tests=("${TESTS[@]}" "${EXT_TESTS[@]}")
  ((!cuda)) || tests=("${EXT_TESTS[@]}")  # the others ran against the installed wheel
  "$py" -m pytest -q -p no:cacheprovider "${tests[@]}" > "$out/pytest.log" 2>&1
  rc=$?
  set -e
  cd "$ROOT"
  counts="$(tail -n 1 "$out/pytest.log")"
  line="torch $version ($(( $(date +%s) - start )) s, cuda build=$cuda): fast path: $info; $counts"
  echo "$line"
  summary+=("$line")
  if ((rc != 0)); then
    grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -20
    echo "torch $version: TESTS FAILED"
    exit 1
  fi
  if ((bench)); then
    (cd "$out/pkg" && cp -r "$ROOT/benchmarks" . &&
      PYTHONPATH="$out/pkg" "$py" benchmarks/bench_init.py --devices cpu --sizes 64Mi --dtypes float8_e4m3fn \
        --repeats 7 --out "$out/bench" | grep -E "^cpu .* (new|init_) ")
    cp "$out/bench/bench_init.json" "${TMPDIR:-/tmp}/fp8_dummy_bench_torch_$version.json"
  fi
  rm -rf "$out"
done
printf '%s\n' "${summary[@]}"
