#!/usr/bin/env bash
# The main job: set up, then initialize a small FP8 model with fp8_dummy and with the
# reference path on the best available device, check the bytes, print times and scratch.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/setup_env.sh | tail -n 1)
exec "$py" scripts/demo.py "$@"
