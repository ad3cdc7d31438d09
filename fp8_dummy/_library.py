"""Which compiled library this process loads. A source build has one, fp8_dummy/_C. A release
wheel (scripts/build_wheels.sh, docs/cpp.md) has one host library per torch major.minor in
fp8_dummy/_libs/torch-X.Y/ and, where it was built with CUDA, that torch's CUDA kernels
beside it: the ones for the installed torch are loaded, the CUDA kernels only where torch is
a CUDA build. A torch the wheel has no library for, or a CUDA runtime its kernels cannot use,
is an ImportError that names what the wheel supports and the source build; never a crash,
never a library without the CUDA kernels on a CUDA torch."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import torch

_PACKAGE = Path(__file__).resolve().parent
LIBS = _PACKAGE / "_libs"  # a release wheel's libraries and their manifest.json
SOURCE_BUILD = (
    "or build fp8_dummy from source against this torch (pip install --no-binary fp8_dummy "
    "fp8_dummy, or pip install . in its source tree: a C++ compiler, and nvcc for the CUDA "
    "kernels; docs/cpp.md)"
)

# What was loaded: the host library's module and, where loaded, the CUDA kernels' file.
cuda_library: Path | None = None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in text.split("."))


def major_minor(version: str) -> str:
    """The torch a library set is built for: "2.13" for "2.13.0+cpu"."""
    return ".".join(version.split("+")[0].split(".")[:2])


def manifest() -> dict | None:
    """The release wheel's manifest.json (None: a source build)."""
    path = LIBS / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _supported(info: dict) -> str:
    versions = ", ".join(sorted(info["torch"], key=_version))
    kinds = f"CPU and CUDA {info['cuda']} builds" if info.get("cuda") else "CPU code only"
    return f"torch {versions} ({kinds})"


def problem(info: dict, torch_version: str, torch_cuda: str | None, torch_hip: str | None) -> str:
    """Why the wheel described by `info` cannot run with this torch, or "" (pure: tested)."""
    found = f"this Python has torch {torch_version}"
    wheel = f"fp8_dummy's wheel has libraries for {_supported(info)}"
    if major_minor(torch_version) not in info["torch"]:
        return f"{wheel}; {found}. Install one of those, {SOURCE_BUILD}."
    if torch_hip:
        return f"{wheel}; {found}, a ROCm build (HIP {torch_hip}): {SOURCE_BUILD}."
    wheel_cuda = info.get("cuda")
    if torch_cuda and wheel_cuda:
        ours, theirs = _version(wheel_cuda), _version(torch_cuda)
        if theirs[0] != ours[0] or theirs < ours:
            return (
                f"{wheel}: its CUDA kernels are built with CUDA {wheel_cuda} and need a torch "
                f"built for CUDA {ours[0]} ({wheel_cuda} or later); {found}, built for CUDA "
                f"{torch_cuda}. Install a CUDA {ours[0]} build of torch, {SOURCE_BUILD} with "
                f"an nvcc of CUDA {torch_cuda}."
            )
    return ""


def _import_host(path: Path) -> ModuleType:
    """The host library as the module fp8_dummy._C (its PyInit__C), as a source build's."""
    spec = importlib.util.spec_from_file_location("fp8_dummy._C", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fp8_dummy._C"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["fp8_dummy._C"]
        raise
    return module


def load() -> ModuleType:
    """fp8_dummy._C, loaded: the source build's, or the release wheel's for this torch (with
    its CUDA kernels on a CUDA build of torch)."""
    global cuda_library
    info = manifest()
    if info is None:
        try:
            from . import _C
        except ImportError as error:  # say which torch it was built for, and how to rebuild
            from ._build import import_error

            raise import_error(error) from error
        return _C
    why = problem(info, torch.__version__, torch.version.cuda, getattr(torch.version, "hip", None))
    if why:
        raise ImportError(f"fp8_dummy: {why}")
    entry = info["torch"][major_minor(torch.__version__)]
    host = LIBS / entry["host"]
    try:
        module = _import_host(host)
        if torch.version.cuda and entry.get("cuda"):
            torch.ops.load_library(str(LIBS / entry["cuda"]))
            cuda_library = LIBS / entry["cuda"]
    except (ImportError, OSError) as error:
        raise ImportError(
            f"fp8_dummy: its library for torch {entry['built_with']} does not load with torch "
            f"{torch.__version__} ({Path(torch.__file__).parent}): {error}. Reinstall torch "
            f"(its CUDA libraries too, on a CUDA build), {SOURCE_BUILD}."
        ) from error
    return module


def files() -> list[Path]:
    """The compiled files this process loaded: the host library, then the CUDA kernels'."""
    module = sys.modules.get("fp8_dummy._C")
    host = [Path(module.__file__)] if module is not None else []
    return host + ([cuda_library] if cuda_library is not None else [])


C = load()  # fp8_dummy._C, loaded when the package is imported
