"""Build of the fp8_dummy extension (torch.utils.cpp_extension, ninja; docs/cpp.md).

Environment: FP8_DUMMY_CUDA=1|0 (default: on for a CUDA torch with nvcc found),
TORCH_CUDA_ARCH_LIST (always obeyed; defaults: build_backend/fp8_dummy_build_config.py),
FP8_DUMMY_DEBUG=1 (-O0 -g); for the release wheel (scripts/build_wheels.sh, docs/cpp.md):
FP8_DUMMY_SPLIT_CUDA=1 (the CUDA kernels as a library of their own, fp8_dummy._C_cuda, linked
against the host library fp8_dummy._C, which then has no CUDA code), FP8_DUMMY_PREBUILT=DIR
(a wheel of the libraries built before, one folder per torch: nothing is compiled). pip runs
this through build_backend/fp8_dummy_backend.py. Wheels and regular installs also get
include/fp8_dummy/** and cmake/ (fp8_dummy/include/, fp8_dummy/share/cmake/fp8_dummy/; an
editable install reads the source tree's) and the TensorRT-LLM start-up hook startup/ (top of
site-packages; not in an editable install).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys

import torch
from setuptools import Distribution, find_packages, setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "build_backend"))
import fp8_dummy_build_config as config  # noqa: E402  (the build's decisions, torch-free)

TORCH_MAJOR_MINOR = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
ABI3 = TORCH_MAJOR_MINOR >= (2, 6)  # torch's limited-API support (it defines Py_LIMITED_API)
CMAKE_DIR = os.path.join("fp8_dummy", "share", "cmake", "fp8_dummy")  # get_cmake_dir()
STARTUP_FILES = ("fp8_dummy_startup.pth", "_fp8_dummy_startup.py")
USE_CUDA, CUDA_WARNING = config.cuda_decision(
    os.environ.get("FP8_DUMMY_CUDA"), torch.__version__, torch.version.cuda, CUDA_HOME
)


PREBUILT = os.environ.get("FP8_DUMMY_PREBUILT")  # scripts/build_wheels.sh's libraries
# numpy: the package imports it (the realistic model's MoE routing).
if PREBUILT:
    with open(os.path.join(PREBUILT, "manifest.json")) as f:
        built_for = json.load(f)["torch"]  # {"2.11": {...}, ...}
    # From the oldest torch built for, without a cap: on a newer torch the import names the
    # supported ones (fp8_dummy/_library.py) where a cap would make pip replace that torch.
    oldest = min(built_for, key=lambda v: tuple(map(int, v.split("."))))
    REQUIRES = [f"torch>={oldest}", "numpy"]
else:  # The torch major.minor built against (any patch or local build): torch's C++ ABI.
    REQUIRES = ["torch=={}.{}.*".format(*TORCH_MAJOR_MINOR), "numpy"]
SPLIT_CUDA = USE_CUDA and os.environ.get("FP8_DUMMY_SPLIT_CUDA", "0") == "1"
CUDA_LIBRARY = "fp8_dummy._C_cuda"  # the split build's CUDA kernels (fp8_dummy/_library.py)


def extensions():
    """fp8_dummy._C; in a split CUDA build, fp8_dummy._C without CUDA code and _C_cuda."""
    if PREBUILT:
        return []
    opt = ["-O0", "-g"] if os.environ.get("FP8_DUMMY_DEBUG", "0") == "1" else ["-O3"]
    # CMakeLists.txt's globs. No -std: BuildExtension adds the one torch's headers need.
    sources = sorted(glob.glob(os.path.join("csrc", "**", "*.cpp"), recursive=True))
    cuda_sources = sorted(glob.glob(os.path.join("csrc", "cuda", "*.cu"))) if USE_CUDA else []
    macros = [("FP8_DUMMY_PYTHON_MODULE", None)]  # python_module.cpp's PyInit__C: fp8_dummy._C
    extra = {"cxx": opt + ["-fdiagnostics-color=always"], "nvcc": opt + ["-lineinfo"]}
    common = {
        "include_dirs": [os.path.join(ROOT, "include"), os.path.join(ROOT, "csrc")],
        "extra_compile_args": extra,
        **({"py_limited_api": True} if ABI3 else {}),
    }
    if SPLIT_CUDA:
        host_macros = macros + [("FP8_DUMMY_CUDA_SEPARATE", None)]
        host = CppExtension("fp8_dummy._C", sources, define_macros=host_macros, **common)
        # Its link to the host library (file name, run path $ORIGIN): BuildExt adds it.
        cuda_macros = [("FP8_DUMMY_WITH_CUDA", None)]
        cuda = CUDAExtension(CUDA_LIBRARY, cuda_sources, define_macros=cuda_macros, **common)
        return [host, cuda]
    if USE_CUDA:
        macros.append(("FP8_DUMMY_WITH_CUDA", None))
        sources += cuda_sources
        return [CUDAExtension("fp8_dummy._C", sources, define_macros=macros, **common)]
    return [CppExtension("fp8_dummy._C", sources, define_macros=macros, **common)]


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """torch's build_ext, after the CUDA architectures are chosen and logged."""

    def build_extensions(self) -> None:
        if getattr(self, "editable_mode", False):
            # setuptools' editable build_temp is a new temporary directory each time: a fixed
            # one keeps ninja's incremental build and ccache's hits across clones.
            self.build_temp = os.path.join(ROOT, "build", "editable-temp")
        if USE_CUDA:
            os.environ["TORCH_CUDA_ARCH_LIST"] = self._cuda_archs()
        elif CUDA_WARNING:
            print(f"\n{CUDA_WARNING}\n", file=sys.stderr)
        for ext in self.extensions:
            if ext.name == CUDA_LIBRARY:  # linked to the host library, found beside it
                host = self.get_ext_fullpath("fp8_dummy._C")
                ext.library_dirs.append(os.path.dirname(host))
                ext.extra_link_args += [f"-l:{os.path.basename(host)}", "-Wl,-rpath,$ORIGIN"]
        super().build_extensions()
        for ext in self.extensions:  # a library torch's process cannot use is no build
            path = self.get_ext_fullpath(ext.name)
            symbols = config.private_stdlib_symbols(path)
            if symbols:
                os.remove(path)
                raise RuntimeError(config.private_stdlib_error(path, symbols, dict(os.environ)))

    def _cuda_archs(self) -> str:
        supported, how = config.nvcc_archs(os.path.join(CUDA_HOME or "", "bin", "nvcc"))
        # In place (editable, build_ext --inplace): the library runs on this machine's GPUs.
        editable = bool(getattr(self, "editable_mode", False) or self.inplace)
        local = []
        if editable and torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                local.append("{}.{}".format(*torch.cuda.get_device_capability(i)))
        archs, why = config.choose_arch_list(
            os.environ.get("TORCH_CUDA_ARCH_LIST"), supported, local, editable
        )
        print(f"fp8_dummy: CUDA architectures {archs} ({why}; {how})", file=sys.stderr)
        return archs


class BuildPyWithCxxApi(build_py):
    """build_py that adds the headers, the CMake package and the start-up hook."""

    def _extra_files(self) -> list[tuple[str, str]]:
        """(source, destination relative to the build tree) of each added file."""
        files = [(os.path.join(ROOT, "startup", f), f) for f in STARTUP_FILES]
        headers = glob.glob(os.path.join(ROOT, "include", "fp8_dummy", "**", "*"), recursive=True)
        for src in sorted(h for h in headers if os.path.isfile(h)):
            files.append((src, os.path.join("fp8_dummy", os.path.relpath(src, ROOT))))
        for name in ("fp8_dummyConfig.cmake", "fp8_dummyConfigVersion.cmake.in"):
            dst = os.path.join(CMAKE_DIR, name.removesuffix(".in"))
            files.append((os.path.join(ROOT, "cmake", name), dst))
        prebuilt = glob.glob(os.path.join(PREBUILT, "**", "*"), recursive=True) if PREBUILT else []
        for src in sorted(p for p in prebuilt if os.path.isfile(p)):
            files.append((src, os.path.join("fp8_dummy", "_libs", os.path.relpath(src, PREBUILT))))
        return files

    def run(self) -> None:
        super().run()
        for src, rel in self._extra_files():
            dst = os.path.join(self.build_lib, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if not src.endswith(".in"):
                shutil.copyfile(src, dst)
                continue
            with open(src) as f, open(dst, "w") as out:  # CMakeLists.txt fills it in too
                out.write(f.read().replace("@FP8_DUMMY_VERSION@", self.distribution.get_version()))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = [os.path.join(self.build_lib, rel) for _, rel in self._extra_files()]
        return super().get_outputs(include_bytecode) + extra


class PrebuiltDistribution(Distribution):
    """A wheel of prebuilt libraries is a platform wheel, as one that compiles them."""

    def has_ext_modules(self) -> bool:
        return True


# (A prebuilt wheel's manylinux tag is set after it is built, from its libraries' symbols.)
wheel_options = {"py_limited_api": "cp39"} if ABI3 or PREBUILT else {}
setup(
    packages=find_packages(include=["fp8_dummy", "fp8_dummy.*"]),
    install_requires=REQUIRES,
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExt, "build_py": BuildPyWithCxxApi},
    options={"bdist_wheel": wheel_options} if wheel_options else {},
    **({"distclass": PrebuiltDistribution} if PREBUILT else {}),
)
