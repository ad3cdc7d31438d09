"""The CPU emulator of the CUDA path against the independent numpy oracle
(tests/oracles/cuda_reference.py): bytes, layouts, generator offsets, launch split, FP8 modes.
CPU only; this is how CI keeps the CUDA semantics honest without a GPU."""

from __future__ import annotations

import pytest
import torch
from conftest import BOUNDS
from ext import test_ops

np = pytest.importorskip("numpy")  # the oracle is numpy

from conftest import storage_bytes  # noqa: E402
from ext.emulator import A100, H200, cuda_launch_plan, emulate_cuda_init_  # noqa: E402
from helpers.cuda_checks import FP8_NAMES as FP8  # noqa: E402
from helpers.cuda_checks import expected_bytes, outside_view, torch_saturates_e4m3fn  # noqa: E402
from oracles import cuda_reference as oracle  # noqa: E402

import fp8_dummy  # noqa: E402,F401  (registers the ops)

DEVICES = {"H200": H200, "A100": A100, "small": (3, 1536)}  # small: T = 4608, many steps


def check(t, low=-1.0, high=1.0, seed=1234, offset=0, device=H200, saturate=True):
    """Emulate into t twice (storage poisoned with 0x55, then 0xAA) and compare every
    byte with the oracle: all of t written, nothing outside t touched."""
    want, want_after = expected_bytes(t, low, high, seed, offset, device, saturate)
    as_int = torch.uint8 if t.element_size() == 1 else torch.int16
    for poison in (0x55, 0xAA):
        storage_bytes(t).fill_(poison)
        after = emulate_cuda_init_(
            t,
            low,
            high,
            seed,
            offset=offset,
            sm_count=device[0],
            max_threads_per_sm=device[1],
            saturate_e4m3fn=saturate,
        )
        assert after == want_after
        assert torch.equal(t.view(as_int), want.view(as_int))
        storage = storage_bytes(t).view(as_int)
        fill = (
            poison if as_int == torch.uint8 else poison * 0x101 - (0x10000 if poison > 0x7F else 0)
        )
        assert bool((storage[outside_view(t)] == fill).all())


@pytest.mark.parametrize("device", DEVICES.values(), ids=DEVICES.keys())
def test_sizes_around_the_grid(device):
    full = device[0] * device[1]  # T: the device's full thread count
    for n in (1, 255, 256, 257, 4097, full - 1, full, full + 1, 4 * full + 3):
        check(torch.empty(n, dtype=torch.float8_e4m3fn), -1.0, 1.0, seed=n, device=device)


@pytest.mark.parametrize("name", FP8 + ["float16"])
@pytest.mark.parametrize("bounds", BOUNDS, ids=str)
def test_dtypes_and_bounds(name, bounds):
    t = torch.empty(3, 1231, dtype=getattr(torch, name))
    check(t, *bounds, seed=987654321, offset=8, device=A100)


def test_large_odd_size_seed_and_offset():
    t = torch.empty(1_000_003, dtype=torch.float8_e5m2)
    check(t, -500.0, 500.0, seed=-5, offset=12, device=H200)


@pytest.mark.parametrize("seed", [0, 1, 1234, 2**32 + 7, 2**63 - 1, -1])
def test_seeds(seed):
    check(
        torch.empty(70_001, dtype=torch.float8_e4m3fn), -1.0, 1.0, seed=seed, offset=4 * seed % 64
    )


def test_e4m3fn_nan_mode():
    t = torch.empty(50_000, dtype=torch.float8_e4m3fn)
    check(t, 0.0, 60000.0, device=H200, saturate=False)
    assert (t.view(torch.uint8) == 0x7F).any()  # the NaN-above-464 rule was exercised


LAYOUTS = {
    "transposed": lambda dt: torch.empty(301, 517, dtype=dt).t(),
    "gaps": lambda dt: torch.empty(97, 2 * 263, dtype=dt)[:, ::2],
    "channels_last": lambda dt: torch.empty(3, 17, 29, 31, dtype=dt).to(
        memory_format=torch.channels_last
    ),
    "storage_offset": lambda dt: torch.empty(100_003, dtype=dt)[5:],
    "permuted_gaps": lambda dt: torch.empty(9, 31, 3 * 37, dtype=dt).permute(2, 0, 1)[::3],
    "many_dims": lambda dt: torch.empty([4] * 8, dtype=dt)[(slice(None, None, 2),) * 8],
    "0_dim": lambda dt: torch.empty((), dtype=dt),
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e8m0fnu", "float16"])
def test_layouts(layout, name):
    check(layout(getattr(torch, name)), -500.0, 500.0, seed=77, offset=4, device=H200)


def test_zero_elements_touch_nothing():
    t = torch.empty(0, 5, dtype=torch.float8_e5m2)
    assert emulate_cuda_init_(t, -1.0, 1.0, 3, offset=40, sm_count=132) == 40


def test_bad_inputs():
    with pytest.raises(RuntimeError, match="from=1 > to=0"):
        emulate_cuda_init_(torch.empty(4, dtype=torch.float8_e4m3fn), 1.0, 0.0, 3, sm_count=132)
    with pytest.raises(RuntimeError, match="1-byte .FP8, int8, uint8. and float16"):
        emulate_cuda_init_(torch.empty(4), -1.0, 1.0, 3, sm_count=132)
    with pytest.raises(RuntimeError, match="out of bounds"):
        emulate_cuda_init_(torch.empty(4, dtype=torch.float8_e4m3fn), 0.0, 7e4, 3, sm_count=132)


# ---- launches and the split of more than 2^30 elements -------------------------------

SPLIT_SIZES = [
    1,
    270_335,
    270_336,
    270_337,
    2**30 - 1,
    2**30,
    2**30 + 1,
    152_064 * 8192,
    3 * 2**30 + 5,
    2**33 + 12_345,
]


@pytest.mark.parametrize("device", DEVICES.values(), ids=DEVICES.keys())
@pytest.mark.parametrize("n", SPLIT_SIZES)
def test_launch_plan_matches_oracle(device, n):
    runs, after = cuda_launch_plan(n, *device, offset=16)
    want, want_after = oracle.launches(n, *device, 16)
    assert after == want_after
    assert [(r.start, r.count, r.threads, r.offset) for r in runs] == want
    assert sum(r.count for r in runs) == n and all(r.count <= 2**30 for r in runs)


def test_split_example_from_reference():
    # docs/contract.md R3: n = 152064 * 8192 on an H200 advances by 4608 + 2304 + 2304.
    runs, after = cuda_launch_plan(152_064 * 8192, *H200)
    assert after == 9216 and [r.offset for r in runs] == [4608, 6912]


# ---- FP8 conversions and the CUDA probe's mode choice --------------------------------


@pytest.mark.parametrize("name", FP8)
@pytest.mark.parametrize("saturate", [True, False])
def test_conversion_tables_match_numpy_model(name, saturate):
    ours = test_ops.fp8_convert_table(getattr(torch, name), saturate).numpy()
    np.testing.assert_array_equal(ours, oracle.fp8_table(name, saturate))


def torch_cpu_table(name):
    halves = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    return halves.to(getattr(torch, name)).view(torch.uint8)


@pytest.mark.parametrize("name", FP8)
def test_conversion_tables_match_torch_cpu_copy(name):
    ours = test_ops.fp8_convert_table(getattr(torch, name), torch_saturates_e4m3fn())
    assert torch.equal(ours, torch_cpu_table(name))


def pick(table, dtype, hw_table=None):
    return test_ops.pick_fp8_mode(table, dtype, hw_table)


@pytest.mark.parametrize("name", FP8)
def test_mode_probe_picks_torchs_behaviour(name):
    dtype = getattr(torch, name)
    mode, _ = pick(torch_cpu_table(name), dtype)
    want_sat = name != "float8_e4m3fn" or torch_saturates_e4m3fn()
    assert mode == (0 if want_sat else 1)
    nan_mode = torch.from_numpy(oracle.fp8_table(name, saturate=False))
    assert pick(nan_mode, dtype)[0] == (1 if name == "float8_e4m3fn" else 0)
    tampered = torch_cpu_table(name).clone()
    tampered[0x3C00] ^= 1  # float16 1.0 converted wrongly: nothing may match
    assert pick(tampered, dtype) == [-1, 0]
    # Inputs uniform_ never produces (inf, NaN) do not take part in the choice.
    odd_nan = torch_cpu_table(name).clone()
    odd_nan[0x7E00] ^= 1
    assert pick(odd_nan, dtype)[0] == mode


@pytest.mark.parametrize("name", FP8)
def test_hardware_conversion_check(name):
    dtype = getattr(torch, name)
    table = torch_cpu_table(name)
    has_hw = name in ("float8_e4m3fn", "float8_e5m2")
    assert pick(table, dtype, table.clone())[1] == int(has_hw)
    # A hardware table that differs on a subnormal input must not be used...
    sub = table.clone()
    sub[0x0200] ^= 1
    assert pick(table, dtype, sub)[1] == 0
    # ...while one that differs only beyond the hardware limit (saturation where torch
    # gives inf or NaN) may, since the kernel only uses it for bounds within the limit.
    big = table.clone()
    big[0x7BFF] ^= 1  # 65504
    nan_mode = torch.from_numpy(oracle.fp8_table(name, saturate=False))
    if name == "float8_e5m2":
        assert pick(table, dtype, big)[1] == 1
    if name == "float8_e4m3fn":
        big_nan = nan_mode.clone()
        big_nan[0x7BFF] ^= 1
        assert pick(nan_mode, dtype, big_nan) == [1, 1]
        if torch_saturates_e4m3fn():  # saturate mode: the hardware path covers 65504 too
            assert pick(table, dtype, big) == [0, 0]
