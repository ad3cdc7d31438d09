"""What the compiled library was built with, and the error when it does not load: its line
"fp8_dummy-build-info: torch=2.13.0 cuda=no" (csrc/build_info.cpp; a release wheel's host
library says cuda=separate: its CUDA kernels are a library of their own) read from the file then,
to name the torch it needs (most often it was built against another)."""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

import torch

_PACKAGE = Path(__file__).resolve().parent
_MARKER = b"fp8_dummy-build-info: "


def read_build_info(path: Path) -> dict[str, str]:
    """{"torch": "2.13.0", "cuda": "no"} from the library at `path`; {}: no build line in it."""
    data = path.read_bytes()
    start = data.find(_MARKER)
    if start < 0:
        return {}
    end = data.find(b"\0", start)
    line = data[start + len(_MARKER) : end if end >= 0 else None].decode("ascii", "replace")
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def import_error(error: ImportError) -> ImportError:
    """The ImportError to raise when `from . import _C` failed with `error`."""
    found = f"torch {torch.__version__} ({Path(torch.__file__).parent})"
    root = _PACKAGE.parent
    rebuild = "pip install --force-reinstall --no-deps --no-cache-dir <its source dir or sdist>"
    if (root / "setup.py").is_file() and (root / "csrc").is_dir():  # a source tree
        rebuild = f"cd {root} && pip install --no-build-isolation -e ."
    files = [_PACKAGE / f"_C{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    path = next((f for f in files if f.is_file()), None)
    if path is None:
        return ImportError(
            f"fp8_dummy: its compiled library (fp8_dummy._C) is not in {_PACKAGE}: it was never "
            f"built there. Build it against the installed {found}: {rebuild}"
        )
    version = read_build_info(path).get("torch")
    built_for = f"torch {version}" if version else "an unknown torch (no build line in the file)"
    return ImportError(
        f"fp8_dummy: its compiled library {path} does not load: {error}. It was built for "
        f"{built_for}; this Python has {found}. An extension must be built against the torch "
        f"it runs with (its C++ ABI changes between releases): rebuild it: {rebuild}"
    )


def build_info() -> dict[str, object]:
    """The loaded library's {"version", "torch" (its headers'), "cuda" (has CUDA kernels)}."""
    from ._version import __version__

    info = dict(i.split("=", 1) for i in torch.ops.fp8_dummy_internal.build_info().split())
    cuda = info["cuda"] == "yes"
    if info["cuda"] == "separate":  # a release wheel's: the CUDA kernels loaded beside it
        cuda = torch._C._dispatch_has_kernel_for_dispatch_key("fp8_dummy::init_", "CUDA")
    return {"version": __version__, "torch": info["torch"], "cuda": cuda}
