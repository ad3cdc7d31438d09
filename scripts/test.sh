#!/usr/bin/env bash
# The test suite: set up (scripts/setup_env.sh), then run it (GPU tests skip without a GPU).
#   bash scripts/test.sh         the fast tier: every test not marked slow (a few minutes)
#   bash scripts/test.sh --all   every test: the fast tier and the slow one (builds of the
#                                wheel and of consumers, torch.compile, multi-process gloo
#                                runs, long streams); what CI runs (.ci/run)
# Other arguments go to pytest (e.g. -k, --durations=20).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=(-m "not slow")
args=()
for arg in "$@"; do
  if [[ "$arg" == --all ]]; then tier=(); else args+=("$arg"); fi
done
py=$(bash scripts/setup_env.sh | tail -n 1)
# The test extension (tests/ext/: emulators, test-only operators) for that build.
bash tests/ext/build.sh "$py" >&2
# The slow tier's builds (the wheel, consumers) compile through ccache too, where installed.
source scripts/ccache_env.sh >&2
exec "$py" -m pytest tests -q "${tier[@]}" "${args[@]}"
