#!/usr/bin/env bash
# The GPU check: one command on a GPU machine (no network needed) that builds the extension
# in place and proves the CUDA bytes against torch's own CUDA reference, then measures.
#
# Usage: scripts/gpu_check.sh [--quick] [--dry-run] [--budget SECONDS] OUTDIR
#
# Steps, in order of value (a later step never delays an earlier one):
#   a build      setup.py build_ext --inplace, MAX_JOBS = cores, TORCH_CUDA_ARCH_LIST = the
#                GPU's own architecture (9.0 on an H100/H200) unless set; tests/ext/build.sh
#   p proof      scripts/gpu_proof.py: every path that replaces a reference proves itself on
#                this GPU first (the runtime proof users get); fp8_dummy.self_check_report()
#                goes into summary.json ("self_check_report") and the log: which paths hold
#   b bytes      init_, init_.generator, init_many_, init_stateless_ against torch's CUDA
#                reference, byte for byte (tests/test_{reference,init_many,stateless}_cuda.py,
#                the contiguous temp and int8/uint8: tests/test_reference_cuda_contiguous_temp.py);
#                the engines' dummy loaders on CUDA models, the vLLM plugin through a
#                stand-in vLLM (tests/test_engines_{rules,vllm_plugin,trtllm}.py; no engine there)
#   c capture    CUDA graph capture and replay, both forms of init_ (the same files, -k capture)
#   d bench      benchmarks/bench_cuda.py, bench_model.py, bench_stateless.py, bench_trtllm.py
#                (JSON in OUTDIR)
#   e rest       every other test of the fast tier (not marked slow)
# --quick runs a, p, b and d only. One global budget (default 290 s: under 5 minutes) bounds
# the whole run: each step gets the time that is left, so a slow step costs the steps after
# it, never the log of the ones before. Every step appends to OUTDIR/log.txt and records its
# result in OUTDIR/summary.json as it finishes; OUTDIR holds at most 7 files: log.txt,
# summary.json, build.log, bench_cuda.json, bench_model.json, bench_stateless.json,
# bench_trtllm.json (the device tool returns 8).
#
# --dry-run (CI, no GPU): the same steps and bookkeeping; the build step checks that the
# installed extension imports instead of building, the proof runs on the CPU and through the
# emulator, the GPU tests run and skip, the benchmarks are skipped (GPU only), and "rest"
# runs one quick module.
#
# Exit status: 0 every step passed, 1 a step failed or ran out of time, 2 no GPU.
# PYTHON=... picks the interpreter (default: python3).
set -uo pipefail

quick=0 dry=0 budget=290
while [[ $# -gt 1 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --dry-run) dry=1 ;;
    --budget) budget="$2"; shift ;;
    *) echo "gpu_check: unknown option $1" >&2; exit 1 ;;
  esac
  shift
done
OUT="${1:?usage: scripts/gpu_check.sh [--quick] [--dry-run] [--budget SECONDS] OUTDIR}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT"
start_all=$(date +%s)
deadline=$((start_all + budget))
LOG="$OUT/log.txt" SUMMARY="$OUT/summary.json"
: > "$LOG"
rm -f "$SUMMARY"
status=0

log() { echo "$*" | tee -a "$LOG"; }
left() { echo $((deadline - $(date +%s))); }

# summary.json: {"environment": {...}, "steps": [{name, status, seconds, detail}, ...]},
# rewritten after every step so that a run killed from outside keeps what it finished.
record() {  # name status seconds detail [json-file-to-embed]
  "$PY" - "$SUMMARY" "$@" <<'EOF'
import json, os, sys
path, name, status, seconds, detail = sys.argv[1:6]
data = json.load(open(path)) if os.path.exists(path) else {"steps": []}
step = {"name": name, "status": status, "seconds": int(seconds), "detail": detail}
if len(sys.argv) > 6 and os.path.exists(sys.argv[6]):
    step["result"] = os.path.basename(sys.argv[6])
data["steps"].append(step)
json.dump(data, open(path, "w"), indent=1)
EOF
}

# run_step NAME MIN_SECONDS CMD...: runs CMD with the time that is left (if at least
# MIN_SECONDS), its output appended to the log; records ok / FAILED / TIMEOUT / skipped.
run_step() {
  local name="$1" need="$2"; shift 2
  local remaining; remaining=$(left)
  if (( remaining < need )); then
    log "== $name: skipped, $remaining s left of the budget (needs $need)"
    record "$name" skipped 0 "budget: $remaining s left"
    status=1
    return 1
  fi
  log "== $name ($remaining s left)"
  local t0 start_byte; t0=$(date +%s) start_byte=$(( $(wc -c < "$LOG") + 1 ))
  timeout --kill-after=10 "$remaining" "$@" >> "$LOG" 2>&1
  local rc=$? dt=$(( $(date +%s) - t0 ))
  # This step's own pytest tally, if it printed one.
  local tail_line; tail_line="$(tail -c +"$start_byte" "$LOG" |
    grep -E '[0-9]+ (passed|failed|skipped|error)|no tests ran' | tail -n 1)"
  if (( rc == 0 )); then
    log "== $name: ok in $dt s ${tail_line:+($tail_line)}"
    record "$name" ok "$dt" "$tail_line"
  elif (( rc == 124 || rc == 137 )); then
    log "== $name: TIMEOUT after $dt s (budget)"
    record "$name" timeout "$dt" "$tail_line"
    status=1
  else
    log "== $name: FAILED (exit $rc) in $dt s ${tail_line:+($tail_line)}"
    record "$name" failed "$dt" "$tail_line"
    status=1
  fi
  return $rc
}

skip_step() {  # name reason
  log "== $1: skipped ($2)"
  record "$1" skipped 0 "$2"
}

# ---- environment
has_gpu=0
timeout 60 "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' && has_gpu=1
if (( ! has_gpu && ! dry )); then
  log "gpu_check: no GPU (torch.cuda.is_available() is False, or torch failed to load)"
  record environment failed 0 "no GPU"
  exit 2
fi
"$PY" - "$SUMMARY" "$dry" "$quick" "$budget" <<'EOF' | tee -a "$LOG"
import json, os, platform, sys
import torch
path, dry, quick, budget = sys.argv[1:]
env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
       "cores": os.cpu_count(), "dry_run": dry == "1", "quick": quick == "1", "budget_s": int(budget)}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    env.update(gpu=p.name, sm_count=p.multi_processor_count,
               capability="%d.%d" % torch.cuda.get_device_capability(0))
json.dump({"environment": env, "steps": []}, open(path, "w"), indent=1)
print("gpu_check:", ", ".join(f"{k}={v}" for k, v in env.items()))
EOF

export FP8_DUMMY_CUDA=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" PYTHONUNBUFFERED=1
# The in-place build is imported from the source tree (benchmarks/ is not on sys.path).
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if (( has_gpu )); then
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-$("$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability(0))')}"
fi
if [[ -z "${CUDA_HOME:-}" ]] && ! command -v nvcc > /dev/null; then
  export CUDA_HOME=/usr/local/cuda PATH="/usr/local/cuda/bin:$PATH"
fi
# cu13 wheels carry CUDA library headers (cuSPARSE, ...) a bare toolkit may lack.
site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[[ -d "$site/nvidia/cu13/include" ]] && export CPATH="$site/nvidia/cu13/include${CPATH:+:$CPATH}"
pytest=("$PY" -m pytest -q -p no:cacheprovider -rfEs)
gpu_tests=(tests/test_reference_cuda.py tests/test_init_many_cuda.py tests/test_stateless_cuda.py
  tests/test_random_bytes_cuda.py tests/test_engines_rules.py tests/test_engines_vllm_plugin.py
  tests/test_reference_cuda_contiguous_temp.py tests/test_engines_trtllm.py)

# ---- a: build
if (( dry )); then
  run_step build 10 bash -c '"$0" -c "import fp8_dummy; print(\"dry run, no build:\", fp8_dummy.library_path())" &&
    bash tests/ext/build.sh "$0"' "$PY"
else
  # The compiler's output goes to its own file (long); the log gets its last lines.
  run_step build 30 bash -c '"$0" setup.py build_ext --inplace > "$1/build.log" 2>&1 &&
    bash tests/ext/build.sh "$0" >> "$1/build.log" 2>&1; rc=$?
    tail -n 15 "$1/build.log"; exit $rc' "$PY" "$OUT"
fi
built=$?
if (( built != 0 )); then
  log "gpu_check: no build, nothing else can run"
  exit 1
fi

# ---- p: the proof, first: which paths hold on this GPU and torch (a refused key is filled
# by the reference, so the step fails but the run goes on)
run_step proof 20 "$PY" scripts/gpu_proof.py "$SUMMARY"

# ---- b: bytes against torch's own CUDA reference
run_step bytes 20 "${pytest[@]}" "${gpu_tests[@]}" -k "not capture"

# ---- c: graph capture
if (( quick )); then skip_step capture "--quick"; else
  run_step capture 15 "${pytest[@]}" "${gpu_tests[@]}" -k capture
fi

# ---- d: benchmarks
if (( ! has_gpu )); then
  skip_step bench_cuda "no GPU (dry run)"
  skip_step bench_model "no GPU (dry run)"
  skip_step bench_stateless "no GPU (dry run)"
  skip_step bench_trtllm "no GPU (dry run)"
else
  run_step bench_cuda 30 "$PY" benchmarks/bench_cuda.py --json "$OUT/bench_cuda.json"
  run_step bench_model 30 "$PY" benchmarks/bench_model.py --devices cuda --json "$OUT/bench_model.json"
  run_step bench_stateless 20 "$PY" benchmarks/bench_stateless.py --no-cpu --json "$OUT/bench_stateless.json"
  run_step bench_trtllm 10 "$PY" benchmarks/bench_trtllm.py --devices cuda --json "$OUT/bench_trtllm.json"
fi

# ---- e: the rest of the fast tier (the slow one, builds and gloo processes, is for CI)
if (( quick )); then skip_step rest "--quick"; elif (( dry )); then
  run_step rest 10 "${pytest[@]}" tests/test_headers_philox.py
else
  run_step rest 30 "${pytest[@]}" tests -m "not slow" $(printf -- '--ignore=%s ' "${gpu_tests[@]}")
fi

log "gpu_check: done in $(( $(date +%s) - start_all )) s of a $budget s budget, status $status"
exit "$status"
