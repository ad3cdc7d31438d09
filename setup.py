"""Build of the fp8_dummy extension (torch.utils.cpp_extension, ninja).

Environment:
  FP8_DUMMY_CUDA=1|0     force the CUDA build on or off. Default: on when the installed
                         torch is a CUDA build and nvcc is found (CUDA_HOME), never decided
                         by whether a GPU is present; a CUDA torch without nvcc builds
                         CPU-only with a warning (build_backend/fp8_dummy_build_config.py).
  TORCH_CUDA_ARCH_LIST   GPU architectures, always obeyed. Default: 8.0;8.9;9.0;10.0;12.0+PTX
                         less what the installed nvcc cannot build; editable and in-place
                         builds: the visible GPUs' architectures, where there are any.
  FP8_DUMMY_DEBUG=1      -O0 -g.

pip runs this through build_backend/fp8_dummy_backend.py (pyproject.toml), which builds
against the installed torch even with build isolation and never installs one.

Besides the library, the package carries what C++/CUDA consumers build against (see
fp8_dummy.get_include() / get_cmake_dir()): include/fp8_dummy/** (kept once, at the
repository root) as fp8_dummy/include/fp8_dummy/**, and the CMake package of cmake/ as
fp8_dummy/share/cmake/fp8_dummy/. They are copied by build_py into the build tree, so
they land in wheels and regular installs; an editable install finds them in the source
tree instead. Likewise startup/ (the TensorRT-LLM opt-in: fp8_dummy_startup.pth and the
shim it imports, docs/engines.md) goes to the top of site-packages; an editable install
has no such hook (use the one-line patch there).
"""

from __future__ import annotations

import glob
import os
import shutil
import sys

import torch
from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "build_backend"))
import fp8_dummy_build_config as config  # noqa: E402  (the build's decisions, torch-free)

# abi3 wheels need torch's limited-API support (torch >= 2.6), which also defines
# Py_LIMITED_API for the compiler; Python >= 3.9.
# Where the CMake package goes in the Python package (fp8_dummy.get_cmake_dir()).
CMAKE_DIR = os.path.join("fp8_dummy", "share", "cmake", "fp8_dummy")
CMAKE_VERSION_FILE = os.path.join(CMAKE_DIR, "fp8_dummyConfigVersion.cmake")
# FP8_DUMMY_CUDA, else on for a CUDA torch with a CUDA toolkit; the warning for a CUDA torch
# without one is printed when the extension is built.
USE_CUDA, CUDA_WARNING = config.cuda_decision(
    os.environ.get("FP8_DUMMY_CUDA"), torch.__version__, torch.version.cuda, CUDA_HOME
)
# The TensorRT-LLM opt-in (startup/), installed at the top of site-packages.
STARTUP_FILES = ("fp8_dummy_startup.pth", "_fp8_dummy_startup.py")


def torch_at_least(major: int, minor: int) -> bool:
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return version >= (major, minor)


def torch_requirement() -> str:
    """The torch a build runs with: the same major.minor (any patch release or local
    build, +cpu or +cu130), as extensions use torch's unstable C++ ABI."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"torch=={major}.{minor}.*"


def extension():
    use_cuda = USE_CUDA
    debug = os.environ.get("FP8_DUMMY_DEBUG", "0") == "1"
    abi3 = torch_at_least(2, 6)
    # The same globs as CMakeLists.txt: every .cpp of csrc/ (csrc/README.md: registration
    # files at the top, then common/, cpu/), the .cu files of csrc/cuda/ below.
    sources = sorted(glob.glob(os.path.join("csrc", "**", "*.cpp"), recursive=True))
    cxx = ["-O0", "-g"] if debug else ["-O3"]
    # No -std here: torch's BuildExtension adds the C++ standard its headers need
    # (torch 2.14's headers use C++20 features and fail to compile as C++17).
    cxx += ["-fdiagnostics-color=always"]
    define_macros = []
    extra = {"cxx": cxx}
    include_dirs = [os.path.join(ROOT, "include"), os.path.join(ROOT, "csrc")]
    # The PyInit__C stub in ops.cpp: the library is the Python module fp8_dummy._C.
    define_macros.append(("FP8_DUMMY_PYTHON_MODULE", None))
    if use_cuda:
        sources += sorted(glob.glob(os.path.join("csrc", "cuda", "*.cu")))
        define_macros.append(("FP8_DUMMY_WITH_CUDA", None))
        extra["nvcc"] = ["-O0", "-g", "-lineinfo"] if debug else ["-O3", "-lineinfo"]
        cls = CUDAExtension
    else:
        cls = CppExtension
    kwargs = {"py_limited_api": True} if abi3 else {}
    return cls(
        "fp8_dummy._C",
        sources,
        include_dirs=include_dirs,
        define_macros=define_macros,
        extra_compile_args=extra,
        **kwargs,
    )


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """torch's build_ext, after the CUDA architectures are chosen (torch reads
    TORCH_CUDA_ARCH_LIST when it compiles) and the build log says what was decided."""

    def build_extensions(self) -> None:
        if getattr(self, "editable_mode", False):
            # setuptools builds an editable install in a new temporary directory each time:
            # each install would recompile everything, and ccache could not match another
            # clone's objects (it keys paths relative to the build directory). One fixed
            # directory in the tree keeps ninja's incremental build and ccache's hits.
            self.build_temp = os.path.join(ROOT, "build", "editable-temp")
        if USE_CUDA:
            os.environ["TORCH_CUDA_ARCH_LIST"] = self._cuda_archs()
        elif CUDA_WARNING:
            print(f"\n{CUDA_WARNING}\n", file=sys.stderr)
        super().build_extensions()

    def _cuda_archs(self) -> str:
        nvcc = os.path.join(CUDA_HOME or "", "bin", "nvcc")
        supported, how = config.nvcc_archs(nvcc)
        # In place (editable install, build_ext --inplace): the library runs on this machine.
        editable = bool(getattr(self, "editable_mode", False) or self.inplace)
        local = []
        if editable and torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                major, minor = torch.cuda.get_device_capability(i)
                local.append(f"{major}.{minor}")
        archs, why = config.choose_arch_list(
            os.environ.get("TORCH_CUDA_ARCH_LIST"), supported, local, editable
        )
        print(f"fp8_dummy: CUDA architectures {archs} ({why}; {how})", file=sys.stderr)
        return archs


class BuildPyWithCxxApi(build_py):
    """build_py that also puts the headers and the CMake package into the package, and the
    start-up hook (startup/) beside it."""

    def _cxx_api_files(self) -> list[tuple[str, str]]:
        """(source, destination relative to the build tree) of every file to add."""
        # The start-up hook: top level of site-packages, where Python reads .pth files.
        files = [(os.path.join(ROOT, "startup", f), f) for f in STARTUP_FILES]
        include = os.path.join(ROOT, "include")
        for src in sorted(glob.glob(os.path.join(include, "fp8_dummy", "**", "*"), recursive=True)):
            if os.path.isfile(src):
                rel = os.path.relpath(src, include)
                files.append((src, os.path.join("fp8_dummy", "include", rel)))
        cmake_config = os.path.join(ROOT, "cmake", "fp8_dummyConfig.cmake")
        files.append((cmake_config, os.path.join(CMAKE_DIR, "fp8_dummyConfig.cmake")))
        return files

    def run(self) -> None:
        super().run()
        for src, rel in self._cxx_api_files():
            dst = os.path.join(self.build_lib, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(src, dst)
        # The version file, from the template that CMakeLists.txt fills in too.
        with open(os.path.join(ROOT, "cmake", "fp8_dummyConfigVersion.cmake.in")) as f:
            text = f.read().replace("@FP8_DUMMY_VERSION@", self.distribution.get_version())
        with open(os.path.join(self.build_lib, CMAKE_VERSION_FILE), "w") as f:
            f.write(text)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = [rel for _, rel in self._cxx_api_files()]
        extra.append(CMAKE_VERSION_FILE)
        outputs = super().get_outputs(include_bytecode)
        return outputs + [os.path.join(self.build_lib, rel) for rel in extra]


setup(
    packages=find_packages(include=["fp8_dummy", "fp8_dummy.*"]),
    install_requires=[torch_requirement()],
    ext_modules=[extension()],
    cmdclass={
        "build_ext": BuildExt,
        "build_py": BuildPyWithCxxApi,
    },
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if torch_at_least(2, 6) else {},
)
