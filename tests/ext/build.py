"""Build of the test extension (tests/ext/): run by `bash tests/ext/build.sh PYTHON`.

The library, fp8_dummy_test.so, is built for the fp8_dummy that PYTHON imports from this
tree's root (as `python -m pytest` there does) and for its torch, with torch's own
extension build (ninja: nothing is recompiled when nothing changed). It includes the
product's headers (csrc/, include/) and links against the product library itself, so the
emulators call the product's argument checks, reference path and proof registry rather
than a second copy of them. The CUDA roofline (philox_roofline.cu) is built where the
product was built with CUDA. One directory per (product library, torch):
build/test-ext/<torch>-<hash of the library's path>/, which tests/ext/__init__.py finds.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

EXT = Path(__file__).resolve().parent
ROOT = EXT.parents[1]
NAME = "fp8_dummy_test"
# What the library is compiled from: its own sources and the product's headers. The loader
# refuses a library older than any of them (a stale emulator would test old kernel code).
INPUTS = [(EXT / "csrc", "**/*"), (ROOT / "include", "**/*")]
INPUTS += [(ROOT / "csrc", f"**/*.{ext}") for ext in ("h", "cuh")]


def build_dir() -> Path:
    """Where the library for the imported fp8_dummy and torch is (or goes)."""
    import torch

    import fp8_dummy

    library = str(Path(fp8_dummy.library_path()).resolve())
    tag = hashlib.sha256(library.encode()).hexdigest()[:12]
    return ROOT / "build" / "test-ext" / f"torch-{torch.__version__}-{tag}"


def library_file() -> Path:
    return build_dir() / f"{NAME}.so"


def newer_inputs(library: Path) -> list[Path]:
    """The inputs changed since `library` was linked. A build without CUDA compiles no .cu
    and includes no .cuh (its C++ sources include none), so those do not count there."""
    import fp8_dummy

    cuda_only = () if fp8_dummy.build_info()["cuda"] else (".cu", ".cuh")
    built = library.stat().st_mtime
    return [
        p
        for folder, pattern in INPUTS
        for p in folder.glob(pattern)
        if p.is_file() and p.suffix not in cuda_only and p.stat().st_mtime > built
    ]


def build(verbose: bool = False) -> Path:
    import torch
    from torch.utils import cpp_extension

    import fp8_dummy

    product = Path(fp8_dummy.library_path()).resolve()
    cuda = fp8_dummy.build_info()["cuda"]
    sources = sorted(str(p) for p in (EXT / "csrc").rglob("*.cpp"))
    if cuda:
        sources += sorted(str(p) for p in (EXT / "csrc").rglob("*.cu"))
    out = build_dir()
    out.mkdir(parents=True, exist_ok=True)
    # Loads the library once built: an unresolved symbol fails here, not in a test.
    cpp_extension.load(
        name=NAME,
        sources=sources,
        extra_include_paths=[str(ROOT / "include"), str(ROOT / "csrc")],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "-lineinfo"],
        # -l: takes the file name as it is (no lib prefix); the run path finds it again.
        extra_ldflags=[f"-L{product.parent}", f"-l:{product.name}", f"-Wl,-rpath,{product.parent}"],
        build_directory=str(out),
        is_python_module=False,
        verbose=verbose,
    )
    ops = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith(f"{NAME}::")]
    assert ops, f"{NAME} registered no operators"
    # Ninja found it current for every file it includes: a header of the library's that it
    # does not include (newer_inputs counts every one) is then no reason to rebuild it.
    library = out / f"{NAME}.so"
    os.utime(library)
    return library


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this tree's fp8_dummy, as `python -m pytest` sees it
    start = time.monotonic()
    library = build(verbose="-v" in sys.argv[1:])
    print(f"test extension: {library} ({time.monotonic() - start:.0f} s)")
