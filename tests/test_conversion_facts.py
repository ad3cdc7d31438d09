"""One test per fact of docs/cuda.md, "float16 -> FP8 in torch's CUDA copy_": what torch's
kernels do (read from their SASS), and that the device model (include/fp8_dummy/cuda/
fp8_convert.h, the probe's choice in csrc/cuda_plan/conversion_match.h) gives exactly those bytes,
against the independent numpy oracle. CPU only: the probe's logic runs on given tables."""

from __future__ import annotations

import pytest
import torch
from ext import test_ops

np = pytest.importorskip("numpy")  # the oracle is numpy

from oracles import cpu_reference as cpu_oracle  # noqa: E402
from oracles import cuda_reference as oracle  # noqa: E402

import fp8_dummy  # noqa: E402,F401  (registers the ops)

SATURATE, NAN, WRAP = 0, 1, 2  # pick_fp8_mode's modes


def table(name: str, saturate: bool = True) -> torch.Tensor:
    return torch.from_numpy(oracle.fp8_table(name, saturate))


def byte(tab: torch.Tensor, value: float) -> int:
    return int(tab[int(np.float16(value).view(np.uint16))])


def test_e4m3fn_torch_2_13_and_newer_sm90_plus_hardware_saturating():
    # torch >= 2.13 on sm_90 / sm_100 / sm_120: F2FP.SATFINITE.E4M3 (+-448 beyond the range).
    sat = table("float8_e4m3fn", saturate=True)
    assert byte(sat, 460.0) == 0x7E and byte(sat, 60000.0) == 0x7E and byte(sat, -500.0) == 0xFE
    assert torch.equal(test_ops.fp8_convert_table(torch.float8_e4m3fn, True), sat)
    # the probe: saturation, and our hardware pair conversion may stand in (up to 65504)
    assert test_ops.pick_fp8_mode(sat, torch.float8_e4m3fn, sat.clone()) == [SATURATE, 1]


def test_e4m3fn_torch_2_13_and_newer_before_sm90_software_saturating():
    # sm_75 / sm_80 / sm_86 SASS (and sm_89 GPUs, which run sm_86's): c10's software routine,
    # saturating since 2.13: the same bytes, so the same mode; no hardware table there.
    sat = table("float8_e4m3fn", saturate=True)
    assert test_ops.pick_fp8_mode(sat, torch.float8_e4m3fn) == [SATURATE, 0]


def test_e4m3fn_torch_2_11_software_nan_above_464():
    nan = table("float8_e4m3fn", saturate=False)
    assert byte(nan, 448.0) == 0x7E and byte(nan, 464.0) == 0x7E  # rounds down to 448
    assert byte(nan, 466.0) == 0x7F and byte(nan, -60000.0) == 0xFF  # NaN, sign kept
    assert torch.equal(test_ops.fp8_convert_table(torch.float8_e4m3fn, False), nan)
    # the probe: NaN mode; a saturating hardware table stands in only within 448
    sat = table("float8_e4m3fn", saturate=True)
    assert test_ops.pick_fp8_mode(nan, torch.float8_e4m3fn, sat) == [NAN, 1]


@pytest.mark.parametrize("name", ["float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"])
def test_e5m2_and_fnuz_software_on_every_arch(name):
    tab = table(name)
    assert torch.equal(test_ops.fp8_convert_table(getattr(torch, name), True), tab)
    mode, hw = test_ops.pick_fp8_mode(tab, getattr(torch, name), tab.clone())
    assert mode == SATURATE  # the formats' one behaviour
    # fnuz: no hardware path at all; e5m2: ours only where it gives the software bytes
    assert hw == (1 if name == "float8_e5m2" else 0)
    if name == "float8_e5m2":
        assert byte(tab, 60000.0) == 0x7B and byte(tab, 62000.0) == 0x7C  # 57344, then inf


@pytest.mark.parametrize("name", ["int8", "uint8"])
def test_int8_uint8_truncate_then_wrap(name):
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.isfinite(halves)
    want = cpu_oracle.half_to_int8(halves[finite], name, saturate=False)
    ours = test_ops.fp8_convert_table(getattr(torch, name), False).numpy()[finite]
    assert np.array_equal(ours, want)
    wrap = torch.zeros(65536, dtype=torch.uint8)  # inf / NaN: never drawn, not compared
    wrap[torch.from_numpy(finite)] = torch.from_numpy(want)
    assert byte(wrap, 200.7) == 200 and byte(wrap, -1.9) == 0xFF  # toward zero, then mod 256
    assert byte(wrap, 300.0) == 300 % 256 and byte(wrap, -200.0) == (-200) % 256
    assert test_ops.pick_fp8_mode(wrap, getattr(torch, name))[0] == WRAP
