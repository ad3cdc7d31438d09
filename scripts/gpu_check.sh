#!/usr/bin/env bash
# The GPU check: one command on a GPU machine (no network needed) that answers "does every
# path hold on this GPU, and how fast", with a one-line verdict at the end.
#
# Usage: scripts/gpu_check.sh [--dry-run] [--budget SECONDS] [--wheel WHEEL] OUTDIR
#
# --wheel WHEEL: the release wheel (scripts/build_wheels.sh) carried to the GPU machine takes
# the in-place build's place: the build step lays it out as the torch matrix does (the
# wheel's fp8_dummy/ beside copies of tests/, benchmarks/ and the headers, in a temporary
# directory removed at the end), builds only the test extension against its library, and
# every later step runs there, so the CUDA kernels checked are the wheel's.
#
# Steps, in this order (planned seconds: measured on the H200 machine, 16 cores; * = essential):
#   preflight     15  nvcc (path, version), g++, ninja, setuptools, nproc, the CPU and its
#                     SIMD flags, Python, torch, the GPU's name and driver
#   build*        90  setup.py build_ext --inplace for the local GPU's architecture, MAX_JOBS =
#                     cores, with the system's compilers (below); then the test-only
#                     extension (tests/ext/build.sh), if this checkout has one; the compiler
#                     output stays in build.log only when the build fails
#   check*        35  python -m fp8_dummy check --bench --json: every path on the CPU and the
#                     GPU, each in a child process with a timeout; init_ vs the reference
#   bench_cuda*   10  benchmarks/bench_cuda.py: init_ vs both reference paths, 128 Mi elements
#                     (before the tests: the one measurement the verdict needs)
#   tests*       120  the GPU byte tests in strict mode (FP8_DUMMY_STRICT=1: a test that hit a
#                     refused fast path fails, naming it), -v, --maxfail, per-test timeouts
#                     (pytest-timeout, where installed), 8 workers (pytest-xdist, where
#                     installed), the slowest tests' durations
#   capture       10  CUDA graph capture and replay, strict mode too
#   bench_model   45  benchmarks/bench_model.py on CUDA: the 4,576-tensor model (Llama-70B
#                     shapes / 16), the host-cost mode (the same tensors at 16 and 1
#                     elements) and the real Llama-3-70B FP8 shapes (about 72 GB; refused,
#                     exit 2, on a GPU without the room); PREDICTED from the CPU: 15 + 5 + 25
#   bench_stateless 5, bench_trtllm 10
#   bench_export  25  benchmarks/bench_export.py into /dev/shm, fp8-block, 3 runs a side: the
#                     export on this machine's cores against safetensors from memory
#   sass_report   30  benchmarks/sass_report.py: the kernels' SASS counts and PREDICTED times,
#                     next to bench_cuda's measured ones (needs cuobjdump; its table in the log)
# One budget (default 290 s: under 5 minutes) bounds the run: a step starts only if the time
# it needs is left (at the planned durations the default runs the essential steps, capture
# and bench_stateless; every step needs --budget 395), and runs at most until the budget
# ends; what does not fit is reported as "cut", never as a failure. Each step appends to
# OUTDIR/log.txt and to OUTDIR/summary.json as it finishes, so partial results survive
# whatever ends the run; OUTDIR gets at most 8 files: log.txt, summary.json,
# check_<GPU>.json, bench_{cuda,model,stateless,trtllm,export}.json
# (and build.log in their place when the build fails). Stdout shows each step's verdict and
# key numbers; the last line is the verdict.
#
# Exit status: 0 every essential step passed; 1 an essential step failed; 2 no GPU; 3 no
# failure, but the budget cut an essential step. Non-essential steps never change it.
#
# --dry-run (no GPU needed, tested in CI): prints the steps it would run, in order, with the
# planned durations and the steps the budget would cut at them, and exits 0 in a moment: it
# runs nothing (no Python, no build, no test) and writes nothing (OUTDIR is not even created).
# PYTHON=... picks the interpreter (default: python3).
set -uo pipefail

usage="usage: scripts/gpu_check.sh [--dry-run] [--budget SECONDS] [--wheel WHEEL] OUTDIR"
dry=0 budget=290 OUT="" wheel=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --budget)
      [[ $# -ge 2 && "$2" =~ ^[0-9]+$ && "$2" -gt 0 ]] || {
        echo "gpu_check: --budget needs a whole number of seconds above 0; $usage" >&2; exit 1; }
      budget="$2"; shift ;;
    --wheel)
      [[ $# -ge 2 && "$2" == *.whl && -f "$2" ]] || {
        echo "gpu_check: --wheel needs an existing .whl file; $usage" >&2; exit 1; }
      wheel="$(realpath "$2")"; shift ;;
    -*) echo "gpu_check: unknown option $1; $usage" >&2; exit 1 ;;
    *)
      [[ -z "$OUT" ]] || { echo "gpu_check: one OUTDIR only; $usage" >&2; exit 1; }
      OUT="$1" ;;
  esac
  shift
done

if ((dry)); then  # the plan only: nothing below runs, nothing is written
  PY="${PYTHON:-python3}" planned=0 cuts=()
  build_plan="$PY setup.py build_ext --inplace with /usr/bin's gcc and g++, then tests/ext/build.sh"
  [[ -z "$wheel" ]] || build_plan="the wheel $wheel laid out in a temporary directory (the library not built), then tests/ext/build.sh there"
  echo "gpu_check: dry run: the steps, at the planned durations on the H200 machine, budget $budget s; nothing is run or written"
  while IFS='|' read -r name need plan what; do
    if ((budget - planned < need)); then
      echo "== $name: cut by the budget ($((budget - planned)) s left, needs $need): $what"
      cuts+=("$name")  # a cut step takes no time
    else
      echo "== $name: planned, $plan s: $what"
      planned=$((planned + plan))
    fi
  done <<STEPS
preflight|0|15|the tools (nvcc, g++, ninja, setuptools), the CPU, $PY, torch, the GPU and driver
build|30|90|$build_plan
check|30|35|$PY -m fp8_dummy check --bench --timeout 150 --json OUTDIR/check_<GPU>.json
bench_cuda|10|10|benchmarks/bench_cuda.py --json OUTDIR/bench_cuda.json
tests|30|120|FP8_DUMMY_STRICT=1 pytest -n 8, the GPU byte tests but capture
capture|10|10|FP8_DUMMY_STRICT=1 pytest -k capture
bench_model|15|45|benchmarks/bench_model.py --devices cuda --model scaled,tiny,llama-3-70b --json OUTDIR/bench_model.json
bench_stateless|5|5|benchmarks/bench_stateless.py --no-cpu --json OUTDIR/bench_stateless.json
bench_trtllm|10|10|benchmarks/bench_trtllm.py --devices cuda --json OUTDIR/bench_trtllm.json
bench_export|25|25|benchmarks/bench_export.py --formats fp8-block --repeats 3 --dir /dev/shm/... --json OUTDIR/bench_export.json
sass_report|30|30|benchmarks/sass_report.py --check (needs cuobjdump; its table in log.txt)
STEPS
  echo "gpu_check: verdict: DRY RUN: $planned s planned of $budget${cuts[*]:+; the budget would cut ${cuts[*]}}; nothing run"
  exit 0
fi
[[ -n "$OUT" ]] || { echo "gpu_check: $usage" >&2; exit 1; }
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT"
start_all=$(date +%s)
LOG="$OUT/log.txt" SUMMARY="$OUT/summary.json"
: > "$LOG"
rm -f "$SUMMARY"
declare -A result=()

say() { echo "$*" | tee -a "$LOG"; }
left() {
  echo $((budget - $(date +%s) + start_all))
}

# summary.json: {"preflight": {...}, "steps": [{name, status, seconds, detail}, ...]},
# rewritten after every step so that a run killed from outside keeps what it finished.
record() {  # name status seconds detail
  result[$1]=$2
  "$PY" - "$SUMMARY" "$@" <<'EOF'
import json, os, sys, tempfile
path, name, status, seconds, detail = sys.argv[1:6]
data = json.load(open(path)) if os.path.exists(path) else {"steps": []}
data["steps"].append({"name": name, "status": status, "seconds": int(seconds), "detail": detail})
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")  # whole or not at all
with os.fdopen(fd, "w") as f:
    json.dump(data, f, indent=1)
os.replace(tmp, path)
EOF
}

# step NAME NEED PLANNED CAP SHOW CMD...: runs CMD (output appended to the log) if NEED seconds
# are left, for at most CAP seconds or what is left; SHOW filters its output for stdout.
# Records ok, failed, timeout (its own cap: a hang), or cut (the budget, before or during).
step() {
  local name="$1" need="$2" plan="$3" cap="$4" show="$5"; shift 5
  local remaining; remaining=$(left)
  if ((remaining < need)); then
    say "== $name: cut by the budget ($remaining s left, needs $need)"
    record "$name" cut 0 "budget: $remaining s left, needs $need"
    return 0
  fi
  local limit=$((cap < remaining ? cap : remaining)) t0 first
  say "== $name (up to $limit s)"
  t0=$(date +%s) first=$(($(wc -c < "$LOG") + 1))
  timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$? dt=$(($(date +%s) - t0)) status=ok
  local out; out="$(tail -c +"$first" "$LOG")"
  if ((rc == 124 || rc == 137)); then
    status=$([[ $limit -lt $cap ]] && echo cut || echo timeout)
  elif ((rc != 0)); then
    status=failed
  fi
  [[ -n "$show" ]] && grep -E -- "$show" <<< "$out" | tail -n 40
  [[ $status != ok ]] && tail -n 6 <<< "$out" | sed 's/^/   | /'  # why, in short
  local tally; tally="$(grep -E '[0-9]+ (passed|failed|skipped|error)|no tests ran|^verdict:|tests? collected' <<< "$out" | tail -n 1)"
  tally="$(tr -s ' =' ' ' <<< "$tally" | sed 's/^ //; s/ $//')"
  say "== $name: $status in $dt s${tally:+ ($tally)}"
  record "$name" "$status" "$dt" "${tally:-exit $rc}"
}

# ---- preflight: which tools and machine this build and run used
has_gpu=0
timeout 120 "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' && has_gpu=1
export FP8_DUMMY_CUDA=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" PYTHONUNBUFFERED=1
# The in-place build is imported from the source tree (benchmarks/ is not on sys.path).
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [[ -z "${CUDA_HOME:-}" ]] && ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDA_HOME=/usr/local/cuda PATH="/usr/local/cuda/bin:$PATH"
fi
if ((has_gpu)); then
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-$("$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability(0))')}"
fi
# The system's compilers, not an image's CC/CXX: the H200 image sets CXX=/opt/gcc/bin/g++,
# whose link put a private copy of libstdc++'s stream code in the library (every number
# written to a std::ostringstream there crashed); setup.py refuses such a library.
for c in CC:gcc CXX:g++; do
  [[ -x /usr/bin/${c#*:} ]] && export "${c%%:*}=/usr/bin/${c#*:}"
done
# cu13 wheels carry CUDA library headers (cuSPARSE, ...) a bare toolkit may lack.
site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[[ -d "$site/nvidia/cu13/include" ]] && export CPATH="$site/nvidia/cu13/include${CPATH:+:$CPATH}"
timeout 120 "$PY" - "$SUMMARY" "$budget" <<'EOF' | tee -a "$LOG"
import json, os, platform, re, shutil, subprocess, sys
path, budget = sys.argv[1:]
def run(*cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (out.stdout + out.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"not found ({e.__class__.__name__})"
nvcc = shutil.which("nvcc") or "not found"
cpuinfo = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
flags = (re.findall(r"^flags\s*: (.*)$", cpuinfo, re.M) or [""])[0].split()
env = {
    "nvcc": f"{nvcc}: " + (run(nvcc, "--version").splitlines() or [""])[-1],
    "g++": run(os.environ.get("CXX", "g++"), "--version").splitlines()[0],
    "cxx": os.environ.get("CXX", "g++ (PATH)"),
    "ninja": run("ninja", "--version"),
    "setuptools": run(sys.executable, "-c", "import setuptools; print(setuptools.__version__)"),
    "nproc": os.cpu_count(),
    "cpu": (re.findall(r"^model name\s*: (.*)$", cpuinfo, re.M) or [platform.machine()])[0],
    "simd": " ".join(f for f in flags if re.match(r"(avx|sse4|fma|f16c|amx)", f)),
    "python": f"{sys.executable} {platform.python_version()}",
    "pytest_timeout": run(sys.executable, "-c", "import pytest_timeout; print('yes')") == "yes",
    "budget_s": int(budget),
}
try:
    import torch
    env.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
                   gpu_memory_gib=round(p.total_memory / 2**30, 1),
                   driver=run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"))
except Exception as e:  # noqa: BLE001
    env["torch"] = f"does not import: {e}"
import tempfile
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")  # whole or not at all
with os.fdopen(fd, "w") as f:
    json.dump({"preflight": env, "steps": []}, f, indent=1)
os.replace(tmp, path)
for k, v in env.items():
    print(f"preflight: {k}: {v}")
EOF
if ((!has_gpu)); then
  say "gpu_check: no GPU (torch.cuda.is_available() is False, or torch failed to load)"
  record preflight failed 0 "no GPU"
  say "gpu_check: verdict: FAIL: no GPU"
  exit 2
fi
record preflight ok $(($(date +%s) - start_all)) "${TORCH_CUDA_ARCH_LIST:-no GPU}, MAX_JOBS=$MAX_JOBS"
gpu="$("$PY" -c 'import re, torch; print(re.sub(r"[^A-Za-z0-9.]+", "-", torch.cuda.get_device_name(0)) if torch.cuda.is_available() else "cpu")')"
pytest=("$PY" -m pytest -v -p no:cacheprovider -rfE --tb=short --maxfail=25)
"$PY" -c 'import pytest_timeout' 2> /dev/null && pytest+=(--timeout=150)
# The byte tests took over 125 s in one process on the H200 (about 2.5 tests a second, the
# GPU mostly idle), and 153 s with four workers once the engines' tests ran to the end: eight
# workers where pytest-xdist is installed (the image has it), and the slowest tests named.
parallel=()
"$PY" -c 'import xdist' 2> /dev/null && parallel=(-n 8)
gpu_tests=(tests/test_init_cuda.py tests/test_init_many_cuda.py tests/test_stateless_cuda.py
  tests/test_random_bytes_cuda.py tests/test_init_cuda_contiguous_temp.py
  tests/test_engines_rules.py tests/test_engines_vllm_plugin.py tests/test_engines_trtllm.py)
failures='(FAILED|ERROR|FP8_DUMMY_STRICT)'

# ---- build (the test-only extension too, where the checkout has one)
build() {
  if [[ -n "$wheel" ]]; then
    # The wheel as the torch matrix lays it out: its package, none of the checkout's.
    (cd "$PKG" && "$PY" -m zipfile -e "$wheel" . && rm -rf ./*.dist-info ./*startup*) > "$OUT/build.log" 2>&1 &&
      cp -r "$ROOT"/{tests,benchmarks,include,csrc,scripts,pyproject.toml} "$PKG/" ||
      { tail -n 30 "$OUT/build.log"; return 1; }
    cd "$PKG"
  else
    "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; return 1; }
  fi
  if [[ -f tests/ext/build.sh ]]; then
    bash tests/ext/build.sh "$PY" >> "$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; return 1; }
  fi
  rm -f "$OUT/build.log"  # kept only when the build fails (OUTDIR's file count)
  echo "built for sm_${TORCH_CUDA_ARCH_LIST/./} with $MAX_JOBS jobs${wheel:+ (the test extension; the library from the wheel)}: $("$PY" -c 'import fp8_dummy; print(fp8_dummy.library_path(), fp8_dummy.build_info())')"
}
PKG=""
if [[ -n "$wheel" ]]; then
  PKG="$(mktemp -d "${TMPDIR:-/tmp}/fp8_dummy_gpu_check.XXXXXX")"
  trap 'rm -rf "$PKG"' EXIT
  export PYTHONPATH="$PKG${PYTHONPATH#"$ROOT"}"  # the wheel's package, not the checkout's
fi
export -f build
export OUT PY ROOT PKG wheel
step build 30 90 300 'built|error' bash -c build
[[ -z "$PKG" ]] || cd "$PKG"  # every later step runs against the wheel's package
if [[ ${result[build]} == cut ]]; then
  say "gpu_check: verdict: INCOMPLETE: the budget cut the build; nothing else can run"
  exit 3
elif [[ ${result[build]} != ok ]]; then
  say "gpu_check: verdict: FAIL: build ${result[build]}; nothing else can run"
  exit 1
fi

# ---- the check: every path on every device, each in a child process; init_ vs the reference
step check 30 35 200 '^(cpu|cuda|engines|verdict|environment)' "$PY" -m fp8_dummy check --bench --timeout 150 --json "$OUT/check_$gpu.json"

# ---- bench_cuda (essential) before the tests: the tests' length varies, the measurement must not be cut
step bench_cuda 10 10 120 'x \(target|targets met' "$PY" benchmarks/bench_cuda.py --json "$OUT/bench_cuda.json"

# ---- the GPU byte tests, strict: each must prove our kernel, not the reference it falls back to
step tests 30 120 200 "$failures" env FP8_DUMMY_STRICT=1 "${pytest[@]}" "${parallel[@]}" --durations=15 "${gpu_tests[@]}" -k "not capture"

# ---- the other benchmarks
step capture 10 10 90 "$failures" env FP8_DUMMY_STRICT=1 "${pytest[@]}" "${gpu_tests[@]}" -k capture
step bench_model 15 45 180 '' "$PY" benchmarks/bench_model.py --devices cuda --model scaled,tiny,llama-3-70b --json "$OUT/bench_model.json"
step bench_stateless 5 5 90 '' "$PY" benchmarks/bench_stateless.py --no-cpu --json "$OUT/bench_stateless.json"
step bench_trtllm 10 10 90 '' "$PY" benchmarks/bench_trtllm.py --devices cuda --json "$OUT/bench_trtllm.json"
shm="$(mktemp -d /dev/shm/fp8_dummy_bench_export.XXXXXX 2> /dev/null || mktemp -d)"
step bench_export 25 25 90 'export/safetensors' "$PY" benchmarks/bench_export.py --formats fp8-block --repeats 3 --dir "$shm" --json "$OUT/bench_export.json"
rm -rf "$shm"
# Last: it needs cuobjdump (pip install nvidia-cuda-cuobjdump), which a bare GPU machine may
# lack, and it must never cut a measurement.
step sass_report 30 30 300 'PREDICTED|^init_|^reference|target|BUDGET' "$PY" benchmarks/sass_report.py --check

# ---- the verdict: from the essential steps only; cuts are cuts, not failures
essential=(build check tests bench_cuda)
failed=() cut=() others=()
for s in "${essential[@]}"; do
  case "${result[$s]}" in ok) ;; cut) cut+=("$s") ;; *) failed+=("$s ${result[$s]}") ;; esac
done
for s in capture bench_model bench_stateless bench_trtllm bench_export sass_report; do
  [[ "${result[$s]:-}" == ok ]] || others+=("$s ${result[$s]:-not run}")
done
summary="$(for s in "${essential[@]}"; do printf '%s %s, ' "$s" "${result[$s]}"; done)"
also="$(printf '%s, ' "${others[@]}")"
summary="${summary%, }${others:+; also: ${also%, }}; $(($(date +%s) - start_all)) s of $budget"
if ((${#failed[@]})); then
  say "gpu_check: verdict: FAIL: $summary"
  exit 1
elif ((${#cut[@]})); then
  say "gpu_check: verdict: INCOMPLETE (the budget cut ${cut[*]}; nothing failed): $summary"
  exit 3
fi
say "gpu_check: verdict: PASS: $summary"
