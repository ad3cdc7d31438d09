# Sourced by the CI scripts: compile through ccache when it is there, so that a warm CI run
# (a fresh clone, but the cache directory of the previous run) recompiles only the sources
# that changed. Object files are keyed by content (preprocessed source, flags, compiler),
# never by time stamps, so a hit is the same object a full build would make.
#
# Without ccache nothing changes: every build compiles everything, as a user's does.
#   FP8_DUMMY_CACHE   cache root (default ~/.cache/fp8_dummy): ccache/ holds the objects
#   FP8_DUMMY_CCACHE=0  do not use ccache even where it is installed
_ccache_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${FP8_DUMMY_CCACHE:-1}" != 0 ]] && command -v ccache > /dev/null &&
  [[ -d /usr/lib/ccache ]]; then
  export CCACHE_DIR="${FP8_DUMMY_CACHE:-$HOME/.cache/fp8_dummy}/ccache"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-4G}"
  # Paths under the clone are hashed relative to it, so a clone elsewhere still hits.
  export CCACHE_BASEDIR="$_ccache_root" CCACHE_NOHASHDIR=1
  # c++/g++/gcc resolve to ccache's wrappers (torch's builds and CMake call them by name);
  # torch's cpp_extension takes nvcc from PYTORCH_NVCC.
  case ":$PATH:" in *:/usr/lib/ccache:*) ;; *) export PATH="/usr/lib/ccache:$PATH" ;; esac
  _nvcc="${CUDA_HOME:-/usr/local/cuda-13.0}/bin/nvcc"
  [[ -x "$_nvcc" ]] && export PYTORCH_NVCC="ccache $_nvcc"
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  echo "ccache: on ($CCACHE_DIR)"
fi
unset _ccache_root _nvcc
