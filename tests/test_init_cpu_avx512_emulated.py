"""The AVX-512 level of the CPU stream run on any x86-64 CPU with AVX2: its kernels (block
step, tempering, float16 transform, random_ bytes) compiled over SIMDe's portable AVX-512
intrinsics (tests/consumers/avx512_on_simde.cpp) and compared with the portable kernels.
This checks their logic where the hardware is missing (the development machine has no
AVX-512); on AVX-512 hardware the level itself runs in the other CPU tests."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest
import torch.utils.cpp_extension as ext
from helpers.build_util import ROOT, run, which

import fp8_dummy

HARNESS = ROOT / "tests" / "consumers" / "avx512_on_simde.cpp"
SIMDE = Path("/usr/include/simde/x86/avx512.h")


@pytest.mark.slow  # compiles a program with g++
def test_avx512_kernels_on_simde(tmp_path: Path) -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"x86-64 only (this is {platform.machine()})")
    if "avx2=unavailable" in fp8_dummy.cpu_fast_path_info():
        pytest.skip("needs AVX2/FMA/F16C natively (SIMDe emulates only the 512-bit part)")
    if not SIMDE.is_file():
        pytest.skip(f"SIMDe is not installed ({SIMDE} missing): apt-get install libsimde-dev")
    cxx = os.environ.get("CXX") or which("g++") or which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path / "avx512_on_simde"
    include = [f"-I{d}" for d in ext.include_paths()] + [f"-I{ROOT / 'csrc'}"]
    # -ffp-contract=off: with -mfma GCC would contract the portable kernel's separate
    # multiply and add, which the comparison relies on staying apart.
    flags = ["-std=c++20", "-O2", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off"]
    run([cxx, *flags, *include, str(HARNESS), "-o", str(exe)], timeout=300)
    out = run([str(exe)], timeout=120).stdout
    assert out.strip().endswith("0 failed"), out
