#!/usr/bin/env bash
# Builds the test extension (torch.ops.fp8_dummy_test: the CUDA emulators, the CPU stream's
# pieces, launch plans, Philox known answers and, where the product has CUDA, the roofline)
# for PYTHON's torch and for the fp8_dummy it imports from this tree, which must be built
# first. Every set-up calls it (scripts/test.sh, the CI scripts, scripts/gpu_check.sh);
# ninja and ccache make a second call cheap. Details: tests/ext/build.py.
#   bash tests/ext/build.sh PYTHON [-v]
set -euo pipefail
py=${1:?usage: bash tests/ext/build.sh PYTHON [-v]}
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Compiles through ccache where it is installed (a copy of the tree may lack scripts/).
if [[ -f "$root/scripts/ccache_env.sh" ]]; then source "$root/scripts/ccache_env.sh" >&2; fi
cd "$root"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
exec "$py" tests/ext/build.py "$@"
