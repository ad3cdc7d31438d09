"""The CMake side, used as a C++ user would: the top-level CMakeLists.txt built against
this torch's libtorch and installed (then moved: the package must be relocatable), and
tests/consumers/cmake built with find_package(fp8_dummy) against that install, against
the package's own CMake dir (fp8_dummy.get_cmake_dir()) and, with nvcc, as CUDA code.
Slow (the library, ~45 s on 2 cores, and a libtorch consumer, ~20 s)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from helpers.build_util import (
    CONSUMER,
    ROOT,
    cmake_args,
    run,
    torch_prefix,
    undefined_python_symbols,
    which,
)

import fp8_dummy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(which("cmake") is None, reason="cmake not installed"),
]

HEADERS = sorted(
    str(p.relative_to(ROOT / "include")) for p in (ROOT / "include").rglob("*") if p.is_file()
)
HAS_DEVICE_HEADERS = (ROOT / "include" / "fp8_dummy" / "cuda" / "philox.h").is_file()
NO_DEVICE_HEADERS = "include/fp8_dummy/cuda/philox.h is not in this checkout yet"

# Loads the CMake-built library into Python by path (no fp8_dummy package) and checks
# the op against the reference path.
LOAD_IN_PYTHON = r"""
import sys
import torch
torch.ops.load_library(sys.argv[1])
for dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float16):
    t = torch.empty(300, 7, dtype=dtype)
    torch.ops.fp8_dummy.init_(t, -2.0, 2.0, 8)
    g = torch.Generator().manual_seed(8)
    ref = torch.empty(300, 7, dtype=torch.float16).uniform_(-2.0, 2.0, generator=g).to(dtype)
    assert torch.equal(t.view(torch.uint8), ref.view(torch.uint8)), dtype
print("cmake library in python: ok")
"""


def cmake(*args: object) -> str:
    return run([which("cmake"), *args]).stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CMake build installed into a prefix, then moved elsewhere."""
    tmp = tmp_path_factory.mktemp("cmake_install")
    cmake("-S", ROOT, "-B", tmp / "build", *cmake_args(), f"-DCMAKE_PREFIX_PATH={torch_prefix()}")
    cmake("--build", tmp / "build", "-j", "2")
    cmake("--install", tmp / "build", "--prefix", tmp / "prefix")
    moved = tmp / "moved" / "prefix"
    moved.parent.mkdir()
    shutil.move(str(tmp / "prefix"), str(moved))
    return moved


def installed_library(prefix: Path) -> Path:
    (library,) = [p for p in prefix.glob("lib*/libfp8_dummy.so") if p.is_file()]
    return library


@pytest.fixture(scope="module")
def consumer(prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/consumers/cmake with Torch, against the moved install; its build dir."""
    build = tmp_path_factory.mktemp("cmake_consumer")
    out = cmake(
        "-S", CONSUMER, "-B", build, *cmake_args(),
        f"-Dfp8_dummy_DIR={prefix / 'share' / 'cmake' / 'fp8_dummy'}",
        f"-DCMAKE_PREFIX_PATH={torch_prefix()}",
        "-DCONSUMER_WITH_TORCH=ON", "-DCONSUMER_FP8_DUMMY_VERSION=0.1",
        # As some distributions' compilers do: the linked library must stay anyway.
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed",
    )  # fmt: skip
    assert f"fp8_dummy_LIBRARY={installed_library(prefix)}" in out, out
    cmake("--build", build, "-j", "2")
    return build


def test_install_layout(prefix: Path) -> None:
    cmake_dir = prefix / "share" / "cmake" / "fp8_dummy"
    for name in ("fp8_dummyConfig.cmake", "fp8_dummyConfigVersion.cmake", "fp8_dummyTargets.cmake"):
        assert (cmake_dir / name).is_file(), name
    assert HEADERS and all((prefix / "include" / h).is_file() for h in HEADERS)
    library = installed_library(prefix)
    # A libtorch library: no Python anywhere (python_module.cpp is setup.py's only).
    symbols = undefined_python_symbols(library)
    if symbols is not None:
        assert not symbols, symbols
    # Relocatable: no file names the prefix it was installed into.
    original = str(prefix.parents[1] / "prefix")
    for path in cmake_dir.iterdir():
        assert original not in path.read_text(), path


def test_installed_library_loads_in_python(prefix: Path, tmp_path: Path) -> None:
    out = run([sys.executable, "-I", "-c", LOAD_IN_PYTHON, installed_library(prefix)], cwd=tmp_path)
    assert "cmake library in python: ok" in out.stdout


@pytest.mark.parametrize("library", ["cmake install", "python package"])
def test_consumer_calls_op_from_cpp(consumer: Path, prefix: Path, library: str) -> None:
    """call_op: the clear error before loading, then bytes and generator states equal
    to the reference path computed with ATen, with either build of the library."""
    path = installed_library(prefix) if library == "cmake install" else fp8_dummy.library_path()
    out = run([consumer / "call_op", path]).stdout
    print(out)
    assert "call_op: all ok" in out


def test_consumer_links_library(consumer: Path) -> None:
    """link_op: linked with fp8_dummy::fp8_dummy (even under --as-needed), the
    operators are registered at start-up; same checks as call_op."""
    out = run([consumer / "link_op"]).stdout
    print(out)
    assert "loaded by linking" in out and "call_op: all ok" in out


@pytest.mark.skipif(not HAS_DEVICE_HEADERS, reason=NO_DEVICE_HEADERS)
def test_consumer_host_philox_from_install(consumer: Path) -> None:
    assert "philox_kat: ok" in run([consumer / "philox_kat"]).stdout


def test_consumer_of_package_cmake_dir(tmp_path: Path) -> None:
    """Against fp8_dummy.get_cmake_dir() (the source tree for an editable install, the
    package for a wheel), torch-free: it names the package's library."""
    package = f"-Dfp8_dummy_DIR={fp8_dummy.get_cmake_dir()}"
    out = cmake("-S", CONSUMER, "-B", tmp_path, *cmake_args(), package)
    assert f"fp8_dummy_LIBRARY={fp8_dummy.library_path()}" in out, out
    if HAS_DEVICE_HEADERS:
        cmake("--build", tmp_path, "-j", "2")
        assert "philox_kat: ok" in run([tmp_path / "philox_kat"]).stdout


@pytest.mark.skipif(not HAS_DEVICE_HEADERS, reason=NO_DEVICE_HEADERS)
@pytest.mark.skipif(which("nvcc") is None, reason="nvcc not installed")
def test_device_consumer_compiles(tmp_path: Path) -> None:
    """A CUDA kernel of the consumer's own using the device headers (sm_80 and sm_90):
    compiled here; run, it compares device and host bytes where there is a GPU."""
    cmake(
        "-S", CONSUMER, "-B", tmp_path, *cmake_args(), "-DCONSUMER_WITH_CUDA=ON",
        f"-DCMAKE_CUDA_COMPILER={which('nvcc')}", f"-Dfp8_dummy_DIR={fp8_dummy.get_cmake_dir()}",
    )  # fmt: skip
    cmake("--build", tmp_path, "-j", "2", "--target", "device_consumer")
    out = run([tmp_path / "device_consumer"]).stdout
    assert "device_consumer: no GPU, compiled only" in out or " 0 of " in out, out
