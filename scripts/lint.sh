#!/usr/bin/env bash
# Style checks: ruff (Python) and clang-format (C++/CUDA), both from PyPI into the
# given python's environment (default: python3).
# --no-cache: a fresh clone (CI) has no .ruff_cache, so neither may the local run.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3}
"$py" -m pip install -q --disable-pip-version-check ruff clang-format >&2
"$py" -m ruff check --no-cache .
"$py" -m ruff format --no-cache --check .
mapfile -t cfiles < <(git ls-files | grep -E '\.(c|cc|cpp|h|hpp|cu|cuh)$')
"$(dirname "$py")/clang-format" --dry-run -Werror "${cfiles[@]}"
echo "lint: ok"
