"""The stateless mode beyond single fills: the CUDA kernels' index arithmetic run on the
host, the per-bounds table cache, opcheck and torch.compile."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

np = pytest.importorskip("numpy")  # the oracle is numpy

from oracles import stateless as so  # noqa: E402

import fp8_dummy  # noqa: E402,F401  (registers the ops)
from fp8_dummy.stateless import init_stateless_  # noqa: E402


def test_cuda_kernel_index_logic_on_host(tmp_path):
    # The CUDA kernels' index arithmetic, run as host C++ against a per-element loop
    # (tests/consumers/stateless_kernel_on_host.cpp); the GPU itself: tests/test_stateless_cuda.py.
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    root = Path(__file__).resolve().parents[1]
    src = root / "tests" / "consumers" / "stateless_kernel_on_host.cpp"
    if not (root / "csrc" / "cuda" / "stateless_kernel.cuh").exists():
        pytest.skip("CUDA sources not in this tree")
    exe = tmp_path / "emulation"
    flags = ["-O1", "-std=c++17", "-Wno-unknown-pragmas", f"-I{root / 'include'}"]
    subprocess.run([cxx, *flags, str(src), "-o", str(exe)], check=True, timeout=240)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float16], ids=str)
def test_alternating_bounds_and_dtypes(dtype):
    # The last bounds' table is cached: switching bounds (and FP8 formats) back and forth
    # must never reuse a stale one.
    saturate = so.e4m3fn_saturates()
    for low, high in [(-1.0, 1.0), (-1e-3, 1e-3), (-1.0, 1.0), (0.0, 448.0), (-1.0, 1.0)]:
        for dt in (dtype, torch.float8_e4m3fnuz):
            t = init_stateless_(torch.empty(777, dtype=dt), low, high, 5)
            want = so.expected_bytes(np.arange(777), dt, low, high, 5, 0, saturate)
            assert (so.tensor_bits(t) == want).all(), (dt, low, high)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_opcheck(dtype):
    t = torch.empty(5, 7, dtype=dtype)
    torch.library.opcheck(
        torch.ops.fp8_dummy.init_stateless_.default,
        (t, -1.0, 1.0, 3),
        {"key_offset": 2, "element_offset": 10, "element_strides": [9, 1]},
    )


def test_opcheck_fp8():
    # test_schema compares against FP8 ops torch lacks on CPU; the rest applies.
    t = torch.empty(5, 7, dtype=torch.float8_e4m3fn)
    torch.library.opcheck(
        torch.ops.fp8_dummy.init_stateless_.default,
        (t, -1.0, 1.0, 3),
        test_utils=("test_faketensor", "test_autograd_registration"),
    )


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float16], ids=str)
def test_compile_same_bytes(dtype):
    def f(x):
        init_stateless_(x, -1.0, 1.0, 77, key_offset=3)
        return x

    eager = f(torch.empty(33, 17, dtype=dtype))
    compiled = torch.compile(f, fullgraph=True, backend="inductor")(
        torch.empty(33, 17, dtype=dtype)
    )
    assert torch.equal(eager.view(torch.uint8), compiled.view(torch.uint8))
