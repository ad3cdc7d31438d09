"""Build of the fp8_dummy extension (torch.utils.cpp_extension, ninja).

Environment:
  FP8_DUMMY_CUDA=1|0     force the CUDA build on or off. Default: on when the installed
                         torch is a CUDA build and nvcc is found (CUDA_HOME), never decided
                         by whether a GPU is present.
  TORCH_CUDA_ARCH_LIST   GPU architectures; default "8.0;8.9;9.0;10.0;12.0+PTX".
  FP8_DUMMY_DEBUG=1      -O0 -g.
"""

from __future__ import annotations

import glob
import os

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCHS = "8.0;8.9;9.0;10.0;12.0+PTX"
# abi3 wheels need torch's limited-API support (torch >= 2.6), which also defines
# Py_LIMITED_API for the compiler; Python >= 3.9.


def want_cuda() -> bool:
    flag = os.environ.get("FP8_DUMMY_CUDA", "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None


def torch_at_least(major: int, minor: int) -> bool:
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return version >= (major, minor)


def extension():
    use_cuda = want_cuda()
    debug = os.environ.get("FP8_DUMMY_DEBUG", "0") == "1"
    abi3 = torch_at_least(2, 6)
    sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")))
    cxx = ["-O0", "-g"] if debug else ["-O3"]
    # No -std here: torch's BuildExtension adds the C++ standard its headers need
    # (torch 2.14's headers use C++20 features and fail to compile as C++17).
    cxx += ["-fdiagnostics-color=always"]
    define_macros = []
    extra = {"cxx": cxx}
    include_dirs = [os.path.join(ROOT, "include"), os.path.join(ROOT, "csrc")]
    if use_cuda:
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", DEFAULT_ARCHS)
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


setup(
    packages=find_packages(include=["fp8_dummy", "fp8_dummy.*"]),
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if torch_at_least(2, 6) else {},
)
