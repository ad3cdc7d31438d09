"""fp8_dummy: fill FP8 (and wider float) tensors in place with the bytes of torch's
``empty_like(float16).uniform_().copy_()`` dummy-weight path, without its scratch."""

from __future__ import annotations

from pathlib import Path

import torch  # noqa: F401  (must be loaded before the extension)

from ._version import __version__

try:
    from . import _C  # noqa: F401  (loads the library: torch.ops.fp8_dummy and fp8_dummy_internal)
except ImportError as _error:  # say which torch it was built for, and how to rebuild
    from ._build import import_error

    raise import_error(_error) from _error

from . import _lazy_dtensor, reference, stateless
from ._build import build_info
from ._proof import ProofEntry, self_check_report
from .engines import SEMANTICS, initialize_dummy_weights, is_scale_tensor
from .ops import cpu_fast_path_info, init_, init_many_, random_
from .realistic import initialize_realistic_dummy_weights
from .stateless import init_shard_, init_stateless_, shard_slices

__all__ = [
    "SEMANTICS",
    "ProofEntry",
    "__version__",
    "build_info",
    "cpu_fast_path_info",
    "get_cmake_dir",
    "get_include",
    "init_",
    "init_many_",
    "init_shard_",
    "init_stateless_",
    "initialize_dummy_weights",
    "initialize_realistic_dummy_weights",
    "is_scale_tensor",
    "library_path",
    "random_",
    "reference",
    "self_check_report",
    "shard_slices",
    "stateless",
]

_PACKAGE = Path(__file__).resolve().parent

# DTensor rules (fp8_dummy/dtensor.py), registered once torch.distributed.tensor is imported.
_lazy_dtensor.install()


def library_path() -> str:
    """Path of the compiled library, for ``torch.ops.load_library`` in other processes."""
    return str(Path(_C.__file__).resolve())


def get_include() -> str:
    """Directory holding ``fp8_dummy/fp8_dummy.h`` (C++ API) and ``fp8_dummy/cuda/*.h``.

    For ``include_dirs`` / ``extra_include_paths`` of a consumer's build. A wheel or a
    regular install carries the headers inside the package; an editable install uses
    the source tree's ``include/``.
    """
    for candidate in (_PACKAGE / "include", _PACKAGE.parent / "include"):
        if (candidate / "fp8_dummy" / "fp8_dummy.h").is_file():
            return str(candidate)
    raise FileNotFoundError(f"fp8_dummy's C++ headers are not installed next to {_PACKAGE}")


def get_cmake_dir() -> str:
    """Directory of ``fp8_dummyConfig.cmake``, for ``-Dfp8_dummy_DIR=...``.

    Targets: ``fp8_dummy::headers`` (C++ API, with the consumer's Torch) and
    ``fp8_dummy::cuda_headers`` (torch-free device API). In an editable install it is
    the source tree's ``cmake/``, which has no version file (request no version there).
    """
    for candidate in (_PACKAGE / "share" / "cmake" / "fp8_dummy", _PACKAGE.parent / "cmake"):
        if (candidate / "fp8_dummyConfig.cmake").is_file():
            return str(candidate)
    raise FileNotFoundError(f"fp8_dummy's CMake package is not installed next to {_PACKAGE}")
