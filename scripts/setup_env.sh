#!/usr/bin/env bash
# Creates (or reuses) a virtual environment and builds fp8_dummy into it.
#   FP8_DUMMY_VENV   where (default: .venv in the repository)
#   TORCH_SPEC       which torch to install (default: torch==2.13.0; "none" keeps the
#                    venv's torch, e.g. one made with --system-site-packages)
#   FP8_DUMMY_CUDA   1/0 forces the CUDA build on/off (default: on for a CUDA torch + nvcc)
# Prints the venv's python path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FP8_DUMMY_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
py="$venv/bin/python"
# setuptools: what every supported torch accepts (2.13+ ask for >= 77.0.3, 2.11/2.12 for
# < 82); wheel: setuptools < 70 needs it to build. (matplotlib, for the benchmarks' plots
# only, is not installed here: pip install matplotlib.) transformers: model classes from a
# config for tests/test_realistic_models.py (5.20.2: torch >= 2.6, Python >= 3.10); accelerate:
# transformers' FP8 loader, which tests/test_export.py runs on the exported fp8-block checkpoints.
pkgs=(numpy pytest ninja "setuptools>=77.0.3,<82" wheel transformers==5.20.2 accelerate==1.16.0)
if [ "${TORCH_SPEC:-torch==2.13.0}" != none ]; then
  pkgs+=("${TORCH_SPEC:-torch==2.13.0}")
fi
"$py" -m pip install -q --disable-pip-version-check "${pkgs[@]}" >&2
# Compiles through ccache where it is installed (scripts/ccache_env.sh): a fresh clone on a
# machine that built these sources before recompiles nothing.
source scripts/ccache_env.sh >&2
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation -e . >&2
echo "$py"
