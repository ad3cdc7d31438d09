"""Realistic mode's scales are positive and finite in their own dtype: where the exact scale
underflows an 8-bit float scale (an e4m3 ``weight_scale`` of FP8 or int8 codes, an e4m3
``weight_scale_2`` of NVFP4), the factor moves into the codes or the other scale, and the
dequantized weight keeps its standard deviation. Decoded by the numpy models of
tests/test_realistic_formats.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_realistic_formats import DECODE, FP4, QuantLinear, nibbles, raw, values

import fp8_dummy

E4M3 = torch.float8_e4m3fn
N, K, LAYERS = 64, 4096, 32  # residual std (2 * 32 * 4096)^-0.5: its scales underflow e4m3


def fill(role: str, **tensors: torch.Tensor) -> torch.nn.Module:
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([torch.nn.Module()])
    model.layers[0].add_module(role, QuantLinear(**tensors))
    for t in model.parameters():  # poison: every byte must be written
        t.data.reshape(-1).view(torch.uint8).fill_(0xFF)
    fp8_dummy.initialize_realistic_dummy_weights(model, seed=5, num_layers=LAYERS)
    return getattr(model.layers[0], role)


def fp8_codes(m):
    return DECODE[m.weight.dtype](raw(m.weight))


CASES = {
    "fp8 weight, e4m3 tensor scale": (
        lambda: dict(
            weight=torch.empty(N, K, dtype=E4M3), weight_scale=torch.empty((), dtype=E4M3)
        ),
        lambda m: fp8_codes(m) * values(m.weight_scale),
    ),
    "fp8 weight, e4m3 channel scales": (
        lambda: dict(
            weight=torch.empty(N, K, dtype=E4M3), weight_scale=torch.empty(N, 1, dtype=E4M3)
        ),
        lambda m: fp8_codes(m) * values(m.weight_scale),
    ),
    "fp8 weight, float16 block scales": (
        lambda: dict(
            weight=torch.empty(N, K, dtype=torch.float8_e5m2),
            weight_scale_inv=torch.empty(1, K // 128, dtype=torch.float16),
        ),
        lambda m: fp8_codes(m) * np.repeat(values(m.weight_scale_inv), 128, -1),
    ),
    "int8 weight, e4m3 channel scales": (
        lambda: dict(
            weight=torch.empty(N, K, dtype=torch.int8), weight_scale=torch.empty(N, 1, dtype=E4M3)
        ),
        lambda m: m.weight.numpy().astype(np.float64) * values(m.weight_scale),
    ),
    "nvfp4, e4m3 weight_scale_2": (
        lambda: dict(
            weight=torch.empty(N, K // 2, dtype=torch.uint8),
            weight_scale=torch.empty(N, K // 16, dtype=E4M3),
            weight_scale_2=torch.empty((), dtype=E4M3),
        ),
        lambda m: (
            nibbles(raw(m.weight))
            * np.repeat(values(m.weight_scale), 16, -1)
            * values(m.weight_scale_2)
        ),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("role", ["q_proj", "o_proj"])
def test_scales_never_underflow_and_the_statistics_hold(case, role):
    make, dequant = CASES[case]
    m = fill(role, **make())
    for name, t in m.named_parameters():
        if "scale" in name:
            v = values(t)
            assert np.isfinite(v).all() and (v > 0).all(), f"{case}: {name} = {v.min()}"
    target = K**-0.5 if role == "q_proj" else (2 * LAYERS * K) ** -0.5
    w = dequant(m)
    assert np.isfinite(w).all()
    if case.startswith("int8") and role == "o_proj":
        # codes -1..1 (std 0.816) need a scale of 0.0024, subnormal in e4m3 (steps of 2^-9):
        # the nearest one, within a factor of 1.25
        assert 0.8 < w.std() / target < 1.25, (case, role, w.std(), target)
    else:
        assert abs(w.std() / target - 1) < 0.15, (case, role, w.std(), target)
    assert (raw(m.weight) == 0).mean() < 0.4  # codes, not zeros (int8 at worst -1, 0, 1)


@pytest.mark.skipif(FP4 is None, reason="no float4_e2m1fn_x2")
def test_fp4_codes_with_only_e4m3_block_scales_get_positive_scales():
    """Fixed FP4 codes with no second scale: nothing can take the factor; the scale is the
    dtype's smallest positive value at worst, never 0."""
    m = fill("o_proj", weight=torch.empty(N, K // 2, dtype=torch.uint8),
             weight_scale=torch.empty(N, K // 16, dtype=E4M3))  # fmt: skip
    assert (values(m.weight_scale) > 0).all()
