"""Helpers of the packaging tests: run builds like a user would, in temporary dirs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CONSUMER = ROOT / "tests" / "consumers" / "cmake"
# Builds share the machine (2 cores in CI): at most this many compile jobs.
JOBS = os.environ.get("MAX_JOBS", "2")


def tool_env(**extra: str) -> dict[str, str]:
    """The environment for build tools: this interpreter's bin/ (ninja, cmake from pip)
    first on PATH, as if its venv were activated, and modest parallelism."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("MAX_JOBS", JOBS)
    env.update(extra)
    return env


def which(tool: str) -> str | None:
    return shutil.which(tool, path=tool_env()["PATH"])


def run(cmd: list[str], timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    """Runs cmd; on failure, raises with its output (pytest shows it)."""
    kwargs.setdefault("env", tool_env())
    proc = subprocess.run(
        [str(c) for c in cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        **kwargs,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stdout[-8000:]}"
        )
    return proc


def extension_test_ops() -> set[str]:
    """The operators of the test extension, from its schemas (tests/ext/csrc/test_ops.cpp):
    none may be in the library users install."""
    text = (ROOT / "tests" / "ext" / "csrc" / "test_ops.cpp").read_text()
    return set(re.findall(r'm\.def\(\s*"(\w+)\(', text))


def copy_source_tree(dst: Path) -> Path:
    """The files a fresh clone would have (plus uncommitted, non-ignored ones) in dst,
    so a build there sees no build/ leftovers and writes nothing into the checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            check=True,
        ).stdout.decode()
        files = [f for f in listed.split("\0") if f and (ROOT / f).is_file()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        ignore = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache"}
        files = [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file()
            and not ignore.intersection(p.relative_to(ROOT).parts)
            and not p.name.endswith(".so")
        ]
    for rel in files:
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst / rel)
    return dst


def cmake_args() -> list[str]:
    """Generator (Ninja when there is one: faster and quieter) for cmake -S/-B, and where
    torch is a CUDA build, the CUDA toolkit: its TorchConfig.cmake looks for one (FindCUDA)
    and stops without it, even for a CPU-only consumer like ours."""
    ninja = which("ninja")
    args = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    if torch.version.cuda:
        from torch.utils.cpp_extension import CUDA_HOME

        candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), CUDA_HOME]
        toolkits = [c for c in candidates + ["/usr/local/cuda"] if c]
        toolkits = [c for c in toolkits if Path(c, "include", "cuda_runtime.h").is_file()]
        if not toolkits:
            pytest.skip(
                f"torch {torch.__version__} is a CUDA build: find_package(Torch) needs a CUDA "
                "toolkit, and none was found (set CUDA_HOME)"
            )
        args.append(f"-DCUDA_TOOLKIT_ROOT_DIR={toolkits[0]}")
    return args


def torch_prefix() -> str:
    return torch.utils.cmake_prefix_path


def undefined_python_symbols(library: Path) -> set[str] | None:
    """Python C-API symbols the library needs from the interpreter (None: no nm)."""
    nm = which("nm")
    if nm is None:
        return None
    out = run([nm, "-D", "--undefined-only", library]).stdout
    names = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    return {n for n in names if n.startswith(("Py", "_Py"))}
