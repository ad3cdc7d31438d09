"""The CPU fast path on many threads and at narrow bounds: the split of the stream over 1-8
threads above the size where the op splits, and the FP8 bytes taken straight from the
random bits where few FP8 values occur (cpu/fp8_bytes.h); against torch's reference path
and the numpy oracle. Helpers and the path fixture: test_init_cpu_fast_path.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import FP8_DTYPES
from test_init_cpu_fast_path import (  # noqa: F401  (path: a fixture)
    as_bytes,
    needs_fast_path,
    path,
    reference_oracle,
    run_both,
)

import fp8_dummy
from fp8_dummy.reference import new_path

NARROW = [(-1e-3, 1e-3), (0.0, 0.01), (-0.02, 0.03), (0.1, 0.11), (-3e-5, 2e-5), (-240.0, -200.0)]


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=str)
def test_narrow_bounds(dtype):
    """Bounds where few FP8 values occur: the fast path takes the bytes straight from the
    random bits as a step function (cpu/fp8_bytes.h) from 2048 elements on; below that, and
    for bounds with many values, through float16."""
    for bounds in NARROW:
        for n in (2047, 2048, 100_003):
            ours, ref, s_ours, s_ref = run_both(
                lambda n=n: torch.empty(n, dtype=dtype), *bounds, pre=3
            )
            np.testing.assert_array_equal(ours, ref, err_msg=f"{bounds} n={n}")
            assert torch.equal(s_ours, s_ref)
        want = reference_oracle(100_003, *bounds, dtype, seed=1234, skip=3)
        np.testing.assert_array_equal(ours, want, err_msg=str(bounds))


@pytest.mark.slow  # long streams on 1-8 threads
@pytest.mark.parametrize("level", ["fast", "portable"])
def test_threads_give_same_bytes(monkeypatch, level):
    """1 to 8 threads, each range above the size where the op splits (2 Mi words per
    thread), from mid-block: the same bytes and final state, which are torch's."""
    needs_fast_path()
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", level)
    n = (17 << 20) + 11
    old = torch.get_num_threads()
    outs, states = [], []
    try:
        for threads in range(1, 9):
            torch.set_num_threads(threads)
            g = torch.Generator().manual_seed(21)
            torch.rand(5, generator=g)
            t = torch.full((n,), 0x55, dtype=torch.uint8).view(torch.float8_e4m3fn)
            fp8_dummy.init_(t, -1.0, 1.0, generator=g)
            outs.append(as_bytes(t))
            states.append(g.get_state())
    finally:
        torch.set_num_threads(old)
    for threads, (o, s) in enumerate(zip(outs, states), start=1):
        np.testing.assert_array_equal(o, outs[0], err_msg=f"threads={threads}")
        assert torch.equal(s, states[0]), f"threads={threads}"
    g = torch.Generator().manual_seed(21)
    torch.rand(5, generator=g)
    ref = new_path(torch.empty(n, dtype=torch.float8_e4m3fn), -1.0, 1.0, generator=g)
    np.testing.assert_array_equal(outs[0], as_bytes(ref))
    assert torch.equal(states[0], g.get_state())
    want = reference_oracle(n, -1.0, 1.0, torch.float8_e4m3fn, 21, 5)
    np.testing.assert_array_equal(outs[0], want)
