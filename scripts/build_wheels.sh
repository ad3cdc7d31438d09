#!/usr/bin/env bash
# The release build: one binary wheel that installs on every supported torch, CPU and CUDA
# builds alike, with no compiler (docs/cpp.md, "The release wheel"). For each torch version:
# its venv (scripts/torch_venv.sh, cached), then the libraries built against it from a clean
# copy of the sources: the host library (every .cpp: CPU kernels, checks, proof) and, from
# the .cu files, the CUDA kernels as a second library linked against it (FP8_DUMMY_SPLIT_CUDA=1),
# which the package loads only where torch is a CUDA build. Then one wheel of them all, tagged
# with the manylinux platform its libraries' versioned symbols allow (auditwheel's verdict).
#
# Usage: scripts/build_wheels.sh [--cpu-only] [--torch "VERSION ..."] [--archs LIST] OUTDIR
#   --cpu-only  no CUDA code (no nvcc needed): its operators raise on CUDA tensors, saying so
#   --torch     the torch versions (default: 2.11.0 2.12.0 2.13.0 2.14.1 2.15.0, from the index:
#               CUDA 13 builds), one library set per major.minor
#   --archs     TORCH_CUDA_ARCH_LIST (default: 8.0;8.9;9.0a;10.0a;12.0+PTX)
# Environment: CUDA_HOME (default /usr/local/cuda-13.0), MAX_JOBS (default: the cores),
# FP8_DUMMY_CACHE (the venvs, ccache). Prints the wheel's path on its last line.
set -euo pipefail
shopt -s inherit_errexit  # a failed install inside $(venv_for ...) stops the script

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_venv.sh"  # venv_for
usage="usage: scripts/build_wheels.sh [--cpu-only] [--torch \"VERSION ...\"] [--archs LIST] OUTDIR"
cpu_only=0 versions="2.11.0 2.12.0 2.13.0 2.14.1 2.15.0" archs="8.0;8.9;9.0a;10.0a;12.0+PTX"
outdir=""
while (($#)); do
  case "$1" in
    --cpu-only) cpu_only=1 ;;
    --torch) versions="${2:?$usage}"; shift ;;
    --archs) archs="${2:?$usage}"; shift ;;
    -*) echo "$usage" >&2; exit 1 ;;
    *) [[ -z "$outdir" ]] || { echo "$usage" >&2; exit 1; }; outdir="$1" ;;
  esac
  shift
done
[[ -n "$outdir" ]] || { echo "$usage" >&2; exit 1; }
mkdir -p "$outdir"
outdir="$(cd "$outdir" && pwd)"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda-13.0}" MAX_JOBS="${MAX_JOBS:-$(nproc)}"
nvcc_version=""
if ((!cpu_only)); then
  nvcc_version="$("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')" ||
    { echo "no nvcc in $CUDA_HOME (set CUDA_HOME, or --cpu-only)" >&2; exit 1; }
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/fp8_dummy_wheels.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# A clean copy of the sources: no build/ leftovers or local libraries can reach the wheel.
src="$work/src" stage="$work/libs"
mkdir -p "$src" "$stage"
if [[ "$(git -C "$ROOT" rev-parse --show-toplevel 2> /dev/null)" == "$ROOT" ]]; then
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do if [[ -f "$f" ]]; then printf '%s\0' "$f"; fi; done |
    xargs -0 cp --parents -t "$src")
else  # a copy of the sources that is no checkout of its own (CI's lanes): less build outputs
  (cd "$ROOT" && find . \( -name build -o -name dist -o -name '.venv*' -o -name __pycache__ \) \
    -prune -o -type f ! -name '*.so' -print0 | xargs -0 cp --parents -t "$src")
fi
source "$ROOT/scripts/ccache_env.sh" >&2
export CCACHE_BASEDIR="$src"  # paths in the copy hash as relative ones: a later copy hits

start=$(date +%s)
entries=()
for version in $versions; do
  t0=$(date +%s)
  venv="$(venv_for "$version")"
  py="$venv/bin/python"
  mm="${version%.*}"
  lib="$work/lib-$mm"
  (
    cd "$src"
    export FP8_DUMMY_CUDA=$((!cpu_only)) FP8_DUMMY_SPLIT_CUDA=1
    if ((!cpu_only)); then
      site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
      "$py" -c 'import torch, sys; sys.exit(torch.version.cuda is None)' ||
        { echo "torch $version in $venv is no CUDA build: cannot build its CUDA kernels" >&2; exit 1; }
      export TORCH_CUDA_ARCH_LIST="$archs" PATH="$CUDA_HOME/bin:$PATH"
      # torch's CUDA headers include the CUDA libraries' (cuRAND...), from its nvidia wheels.
      CPATH="$(ls -d "$site"/nvidia/cu1*/include | head -n 1)${CPATH:+:$CPATH}"
      export CPATH
    fi
    "$py" setup.py build_ext --build-temp "$work/temp-$mm" --build-lib "$lib" \
      > "$work/build-$mm.log" 2>&1 ||
      { grep -E "error|Error" "$work/build-$mm.log" | head -30; echo "torch $version: BUILD FAILED" >&2; exit 1; }
  )
  mkdir -p "$stage/torch-$mm"
  cp "$lib"/fp8_dummy/_C*.so "$stage/torch-$mm/"
  # Python's -g in every compile: 23 of a host library's 24 MB are its debug information.
  strip --strip-debug "$stage/torch-$mm"/_C*.so
  built="$("$py" -c 'import torch; print(torch.__version__)')"
  cuda_file=null
  ((cpu_only)) || cuda_file="\"torch-$mm/_C_cuda.abi3.so\""
  entries+=("\"$mm\": {\"built_with\": \"$built\", \"host\": \"torch-$mm/_C.abi3.so\", \"cuda\": $cuda_file}")
  echo "torch $built: $(( $(date +%s) - t0 )) s ($(cd "$stage/torch-$mm" && du -ch _C*.so | tail -n 1 | cut -f1))" >&2
done

# The manifest fp8_dummy/_library.py reads.
cuda_json=null archs_json=null
((cpu_only)) || { cuda_json="\"$nvcc_version\""; archs_json="\"$archs\""; }
{
  echo "{\"cuda\": $cuda_json, \"cuda_archs\": $archs_json, \"torch\": {"
  (IFS=,; echo "${entries[*]}")
  echo "}}"
} > "$stage/manifest.json"
py="$(venv_for "${versions%% *}")/bin/python"
(cd "$src" && FP8_DUMMY_PREBUILT="$stage" "$py" setup.py -q bdist_wheel -d "$work/dist" > "$work/wheel.log" 2>&1) ||
  { tail -n 30 "$work/wheel.log"; echo "wheel: BUILD FAILED" >&2; exit 1; }
wheel="$(ls "$work"/dist/fp8_dummy-*.whl)"

# The platform tag: the oldest manylinux that has every versioned symbol the libraries need
# (glibc, libstdc++), as auditwheel reads them. torch's own libraries are not ours to check.
aw="$FP8_DUMMY_VENVS/venv-auditwheel"
if [[ ! -x "$aw/bin/auditwheel" ]]; then
  rm -rf "$aw" && python3.11 -m venv "$aw" >&2
  "$aw/bin/pip" install -q --disable-pip-version-check auditwheel==6.8.2 >&2
fi
"$aw/bin/auditwheel" show "$wheel" > "$work/auditwheel.txt" 2>&1 || true
# (Its report is wrapped at any space: read as one line.) torch's libraries are external, so
# it names the tag the versioned symbols allow as a constraint; else the consistent tag.
report="$(tr -s '\n ' ' ' < "$work/auditwheel.txt")"
tag='"\(manylinux_[0-9]*_[0-9]*_x86_64\)"'
platform="$(sed -n "s/.*constrains the platform tag to $tag.*/\\1/p" <<< "$report")"
[[ -n "$platform" ]] ||
  platform="$(sed -n "s/.*consistent with the following platform tag: $tag.*/\\1/p" <<< "$report")"
[[ -n "$platform" ]] || { cat "$work/auditwheel.txt"; echo "no manylinux tag fits the libraries" >&2; exit 1; }
"$py" -m wheel tags --remove --platform-tag "$platform" "$wheel" > /dev/null
wheel="$(ls "$work"/dist/fp8_dummy-*"$platform".whl)"
cp "$wheel" "$outdir/"
echo "$(basename "$wheel"): $(du -h "$wheel" | cut -f1), $(( $(date +%s) - start )) s, $platform (auditwheel: the libraries' versioned symbols)" >&2
echo "$outdir/$(basename "$wheel")"
