#!/usr/bin/env bash
# The release wheel (scripts/build_wheels.sh) as users get it: installed into a fresh venv per
# torch version and used with no compiler reachable (PATH without gcc, g++, cc, c++, clang or
# nvcc; CC and CXX a failing command), from a directory outside the checkout: the package
# imports from the venv, never from the source tree. For each version:
#   - `python -m fp8_dummy check --device cpu` holds;
#   - on a CUDA build of torch the CUDA kernels of every public operator are registered
#     (build_info()["cuda"]), on a CPU build none is asked for;
#   - the CPU byte tests (a copy of tests/ outside the checkout) pass against the installed wheel.
# "VERSION+cpu" (the local CPU wheel, 2.13.0+cpu) is installed for real next to the wheel,
# torch alone (`pip install torch==2.13.0 WHEEL`: the wheel's own dependencies must make
# `import fp8_dummy` work), and the op runs before pytest is installed. The other versions'
# torch comes from their cached venvs (scripts/torch_venv.sh) through a .pth line, each venv
# new but without copying gigabytes of CUDA libraries, the wheel installed without resolving
# its dependencies there (pip --no-index would try torch's own again).
#
# Usage: scripts/test_wheel.sh WHEEL [VERSION ...]   (default: 2.11.0 2.12.0 2.13.0+cpu 2.14.1 2.15.0)
set -euo pipefail
shopt -s inherit_errexit

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_venv.sh"  # venv_for
wheel="$(realpath "${1:?usage: scripts/test_wheel.sh WHEEL [VERSION ...]}")"
shift
versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || versions=(2.11.0 2.12.0 2.13.0+cpu 2.14.1 2.15.0)
# The CPU byte tests that need no compiler (the test extension's tests need one).
# (scripts/ci_torch_matrix.sh's TESTS.)
TESTS=(test_init_cpu.py test_random_bytes_cpu.py
  test_init_many_cpu.py test_stateless_cpu.py test_stateless_api.py test_inplace_semantics.py
  test_stateless_dtensor.py test_init_cpu_contiguous_temp.py test_engines_trtllm.py)

work="$(mktemp -d "${TMPDIR:-/tmp}/fp8_dummy_wheel_test.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -r "$ROOT/tests" "$work/tests"
cp "$ROOT/pyproject.toml" "$work/"  # pytest's markers; no package beside it
rm -rf "$work/tests/ext"

# Every tool of the system but the compilers.
tools="$work/tools"
mkdir -p "$tools"
for f in /usr/local/bin/* /usr/bin/* /bin/*; do
  name="${f##*/}"
  case "$name" in
    gcc* | g++* | cc | c++ | cpp* | clang* | nvcc* | *-gcc* | *-g++* | *-cc | *-c++ | ccache | ld | ld.* | as) ;;
    *) [[ -e "$tools/$name" ]] || ln -s "$f" "$tools/$name" ;;
  esac
done
no_compiler=(env -u CUDA_HOME -u CPATH -u PYTHONPATH -u PYTORCH_NVCC CC=false CXX=false CUDAHOSTCXX=false)

summary=()
for version in "${versions[@]}"; do
  start=$(date +%s)
  venv="$work/venv-$version"
  python3.11 -m venv "$venv"
  py="$venv/bin/python"
  pip=("$py" -m pip install -q --disable-pip-version-check)
  if [[ "$version" == *+cpu ]]; then
    "${pip[@]}" "torch===$version" "$wheel"
  else
    base="$(venv_for "$version")"
    site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    "$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/_torch.pth"
    # torch and numpy: the base venv's, seen through the .pth (their own dependencies are not
    # resolved again; the +cpu install above resolves the wheel's).
    "${pip[@]}" --no-index --no-deps "$wheel"
  fi
  run() { (cd "$work" && "${no_compiler[@]}" PATH="$venv/bin:$tools" "$@"); }
  for tool in gcc g++ cc c++ nvcc; do
    if run bash -c "command -v $tool" > /dev/null; then echo "$tool is reachable" >&2; exit 1; fi
  done
  run "$py" - "$venv" << 'EOF'
import sys
from pathlib import Path

import torch

import fp8_dummy

venv = Path(sys.argv[1]).resolve()
for what in (fp8_dummy.__file__, fp8_dummy.library_path()):
    assert venv in Path(what).resolve().parents, f"not the venv's: {what}"
# The CUDA kernels: registered on a CUDA build of torch, unless the wheel has none (--cpu-only).
ops = ("init_", "init_many_", "init_stateless_", "random_")
has = {op: torch._C._dispatch_has_kernel_for_dispatch_key(f"fp8_dummy::{op}", "CUDA") for op in ops}
info = fp8_dummy.build_info()
expected = bool(torch.version.cuda) and fp8_dummy._library.manifest()["cuda"] is not None
assert info["cuda"] == expected and (all(has.values()) or not expected), (info, has)
t = torch.empty(1000, dtype=torch.float8_e4m3fn)
fp8_dummy.init_(t, -1.0, 1.0, seed=5)
ref = torch.empty(1000, dtype=torch.float16).uniform_(-1, 1, generator=torch.Generator().manual_seed(5))
assert torch.equal(t.view(torch.uint8), ref.to(t.dtype).view(torch.uint8))
print(f"wheel: {fp8_dummy.library_path()}, torch {torch.__version__}, {info}")
EOF
  run "$py" -m fp8_dummy check --device cpu > "$work/check-$version.log" 2>&1 ||
    { cat "$work/check-$version.log"; echo "torch $version: CHECK FAILED" >&2; exit 1; }
  [[ "$version" != *+cpu ]] || "${pip[@]}" pytest
  rc=0
  run "$py" -m pytest -q -p no:cacheprovider "${TESTS[@]/#/tests/}" > "$work/pytest-$version.log" 2>&1 || rc=$?
  line="torch $version ($(( $(date +%s) - start )) s): check ok; $(tail -n 1 "$work/pytest-$version.log")"
  echo "$line"
  summary+=("$line")
  if ((rc != 0)); then
    grep -E "^(FAILED|ERROR)" "$work/pytest-$version.log" | head -20
    echo "torch $version: TESTS FAILED" >&2
    exit 1
  fi
  rm -rf "$venv"
done
printf '%s\n' "${summary[@]}"
