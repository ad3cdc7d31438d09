# Sourced by the scripts that need a venv per torch version (scripts/ci_torch_matrix.sh,
# scripts/build_wheels.sh, scripts/test_wheel.sh): venv_for VERSION prints the path of a
# ready venv with that torch from the package index, as users install it (made if missing).
# The venvs are cached in $FP8_DUMMY_CACHE (default ~/.cache/fp8_dummy) as venv-torch-VERSION
# and rebuilt when missing or incomplete (a .ready file marks a finished install).
FP8_DUMMY_VENVS="${FP8_DUMMY_CACHE:-$HOME/.cache/fp8_dummy}"

venv_for() {  # version -> path of a ready venv (made if missing)
  local version="$1" venv="$FP8_DUMMY_VENVS/venv-torch-$1"
  if [[ ! -f "$venv/.ready" ]]; then
    mkdir -p "$FP8_DUMMY_VENVS"
    rm -rf "$venv"
    python3.11 -m venv "$venv" >&2
    # The pip configuration here caps torch below 2.15; an empty constraint file lifts it.
    # "===": that version exactly, as the index has it (a local 2.13.0+cpu wheel would
    # satisfy "==" and win over the index's CUDA build). setuptools: what torch accepts
    # (2.11/2.12: < 82; 2.13+: >= 77.0.3).
    PIP_CONSTRAINT=/dev/null "$venv/bin/pip" install -q --disable-pip-version-check \
      "torch===$version" numpy pytest ninja "setuptools>=77.0.3,<82" wheel >&2
    touch "$venv/.ready"
  fi
  echo "$venv"
}
