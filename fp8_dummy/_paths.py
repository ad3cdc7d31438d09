"""Where the installed pieces are, for build scripts and other processes: the compiled
library, the C++/CUDA headers and the CMake package (``python -m fp8_dummy --library |
--includedir | --cmakedir``; docs/cpp.md)."""

from __future__ import annotations

from pathlib import Path

from ._library import C

__all__ = ["get_cmake_dir", "get_include", "library_path"]

_PACKAGE = Path(__file__).resolve().parent


def library_path() -> str:
    """Path of the compiled library, for ``torch.ops.load_library`` in other processes."""
    return str(Path(C.__file__).resolve())


def get_include() -> str:
    """The C++/CUDA headers' directory: the package's, or an editable install's ``include/``."""
    for candidate in (_PACKAGE / "include", _PACKAGE.parent / "include"):
        if (candidate / "fp8_dummy" / "fp8_dummy.h").is_file():
            return str(candidate)
    raise FileNotFoundError(f"fp8_dummy's C++ headers are not installed next to {_PACKAGE}")


def get_cmake_dir() -> str:
    """``fp8_dummyConfig.cmake``'s directory, for ``-Dfp8_dummy_DIR`` (docs/cpp.md)."""
    for candidate in (_PACKAGE / "share" / "cmake" / "fp8_dummy", _PACKAGE.parent / "cmake"):
        if (candidate / "fp8_dummyConfig.cmake").is_file():
            return str(candidate)
    raise FileNotFoundError(f"fp8_dummy's CMake package is not installed next to {_PACKAGE}")
