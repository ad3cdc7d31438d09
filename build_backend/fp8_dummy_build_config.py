"""The build's decisions, torch-free so that they can be unit-tested
(tests/test_packaging_build_config.py): whether to build the CUDA kernels, for which GPU
architectures, and whether the library linked is one a torch process can load safely.
setup.py applies them."""

from __future__ import annotations

import re
import shutil
import subprocess

# A default CUDA build: A100 (8.0), L40/RTX 40xx (8.9), H100/H200 (9.0), B200/GB200 (10.0),
# RTX 50xx (12.0), PTX of the newest for later GPUs; each with the first nvcc that builds it
# (asked with --list-gpu-arch, else from its version: a CUDA 12.1-12.6 build would fail).
FIRST_NVCC = {"8.0": (11, 0), "8.9": (11, 8), "9.0": (11, 8), "10.0": (12, 8), "12.0": (12, 8)}
DEFAULT_ARCHS = tuple(FIRST_NVCC)


def cuda_decision(
    flag: str | None, torch_version: str, torch_cuda: str | None, cuda_home: str | None
) -> tuple[bool, str | None]:
    """(build the CUDA kernels?, a warning for the build log or None). FP8_DUMMY_CUDA
    (`flag`) decides when set; otherwise a CUDA build of torch with a CUDA toolkit found.
    A CUDA torch without nvcc builds CPU-only, never silently: the warning says so, and
    so does every CUDA call at run time (csrc/build_info.cpp)."""
    value = (flag or "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True, None
    if value in ("0", "false", "no", "off") or torch_cuda is None:
        return False, None
    if cuda_home is None:
        return False, (
            f"fp8_dummy: WARNING: torch {torch_version} is a CUDA build (CUDA {torch_cuda}) but "
            "no CUDA toolkit was found (no nvcc on PATH, CUDA_HOME unset): building WITHOUT "
            "the CUDA kernels, and calls on CUDA tensors will raise an error saying so. To "
            "build them, install the CUDA toolkit and rebuild with CUDA_HOME set "
            "(FP8_DUMMY_CUDA=1 makes a missing nvcc an error); FP8_DUMMY_CUDA=0 builds "
            "CPU-only on purpose, without this warning."
        )
    return True, None


def _arch_key(arch: str) -> tuple[int, int]:
    major, minor = arch.split("+")[0].split(".")
    return int(major), int(minor)


def parse_nvcc_arch_list(text: str) -> set[str]:
    """`nvcc --list-gpu-arch` output ("compute_90", "compute_100", ...) as "9.0", "10.0"."""
    return {f"{n[:-1]}.{n[-1]}" for n in re.findall(r"\bcompute_(\d+)(?![0-9a-z])", text)}


def parse_nvcc_version(text: str) -> tuple[int, int] | None:
    """`nvcc --version` output ("Cuda compilation tools, release 12.6, V12.6.77") as (12, 6)."""
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2])) if m else None


def nvcc_archs(nvcc: str) -> tuple[set[str] | None, str]:
    """The architectures `nvcc` can build ({"8.0", "9.0", ...}, or None if it does not
    say), and how that was found, for the build log."""

    def ask(flag: str) -> str:
        try:
            proc = subprocess.run(
                [nvcc, flag], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        except OSError:
            return ""
        return proc.stdout if proc.returncode == 0 else ""

    listed = parse_nvcc_arch_list(ask("--list-gpu-arch"))
    if listed:
        return listed, f"{nvcc} --list-gpu-arch"
    version = parse_nvcc_version(ask("--version"))
    if version is None:
        return None, f"{nvcc} gave neither its architectures nor its version"
    known = {arch for arch, first in FIRST_NVCC.items() if version >= first}
    return known, f"nvcc {version[0]}.{version[1]}"


def default_arch_list(supported: set[str]) -> str:
    """DEFAULT_ARCHS less what nvcc cannot build, PTX on the newest kept."""
    kept = [a for a in DEFAULT_ARCHS if a in supported]
    if not kept:
        raise ValueError(
            f"fp8_dummy: the installed nvcc builds none of the architectures {DEFAULT_ARCHS} "
            f"(it builds {sorted(supported, key=_arch_key)}); set TORCH_CUDA_ARCH_LIST"
        )
    return ";".join(kept) + "+PTX"


def choose_arch_list(
    env_value: str | None, supported: set[str] | None, local_archs: list[str], editable: bool
) -> tuple[str, str]:
    """(TORCH_CUDA_ARCH_LIST for the build, why). TORCH_CUDA_ARCH_LIST in the environment
    always wins; an editable (or in-place) build, compiled for this machine, targets the
    visible GPUs nvcc can build for (one architecture compiles several times faster than
    five); everything else gets the defaults the installed nvcc can build, never the
    build machine's GPU (a wheel runs elsewhere)."""
    if env_value and env_value.strip():
        return env_value.strip(), "TORCH_CUDA_ARCH_LIST"
    usable = {a for a in local_archs if supported is None or a in supported}
    if editable and usable:
        return ";".join(sorted(usable, key=_arch_key)), "the visible GPUs (editable build)"
    if supported is None:
        return ";".join(DEFAULT_ARCHS) + "+PTX", "the defaults (nvcc did not say what it builds)"
    return default_arch_list(supported), "the defaults the installed nvcc can build"


# std::ostream, std::locale and std::ios_base are not templates a program instantiates: their
# members live in libstdc++.so alone. A library that defines one carries a private copy of
# libstdc++'s stream code (a static libstdc++, or a toolchain that links parts of it), whose
# std::locale the process never initialises, since torch loaded libstdc++.so first: every
# number written to a std::ostringstream (each error message) then comes out empty or
# crashes. Seen: an image whose CXX was /opt/gcc/bin/g++ built a library that crashed so.
# The CMake build applies the same pattern (cmake/check_private_stdlib.cmake: no Python there).
PRIVATE_STDLIB = re.compile(r"^_ZNK?(So|St6locale|St8ios_base)")


def private_stdlib_symbols(library: str, nm: str | None = None) -> list[str] | None:
    """The libstdc++ stream symbols `library` defines itself ([] for a sound library), or
    None where there is no `nm` to read them with (binutils, installed with every g++)."""
    nm = nm or shutil.which("nm")
    if nm is None:
        return None
    try:
        out = subprocess.run([nm, "--defined-only", library], capture_output=True, text=True)
    except OSError:
        return None
    if out.returncode != 0:
        return None
    names = (line.split()[-1] for line in out.stdout.splitlines() if line.strip())
    return sorted({n for n in names if PRIVATE_STDLIB.match(n)})


def private_stdlib_error(library: str, symbols: list[str], env: dict[str, str]) -> str:
    """The build's refusal of a library with a private copy of libstdc++'s stream code."""
    how = ", ".join(f"{k}={env[k]}" for k in ("CXX", "LDFLAGS") if env.get(k)) or "the default"
    return (
        f"fp8_dummy: {library} defines {len(symbols)} of libstdc++'s own stream and locale "
        f"symbols (e.g. {symbols[0]}): the C++ compiler and link ({how}) made a "
        "private copy of part of libstdc++, whose std::locale is never set up in a process "
        "that loaded libstdc++.so before it (torch's), so formatting a number fails or crashes. "
        "Build with a compiler that links libstdc++.so, e.g. CC=gcc CXX=g++ (the system's); "
        "the library was removed."
    )
