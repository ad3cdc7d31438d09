#!/usr/bin/env bash
# The test suite: set up, then run every test (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/setup_env.sh | tail -n 1)
exec "$py" -m pytest tests -q "$@"
