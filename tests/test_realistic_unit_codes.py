"""The design's 0s and 1s in a quantized MTP input projection (fp8_dummy/realistic/speculative/
unit_codes.py): written as the format's codes (NVFP4: packed two a byte, with the rows' block
scales), they decode here from the bytes, times the unit scale 2^-8, to exactly the logical
values, whatever the rows and columns (random); in NVFP4 a column's zeros leave its byte's other
code alone, in whichever order the overrides are written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.dequantize import decode_e2m1_pairs, decode_e4m3

from fp8_dummy.realistic.formats import FORMATS
from fp8_dummy.realistic.routing import apply_overrides
from fp8_dummy.realistic.speculative.unit_codes import UNIT_SCALE, unit_overrides


@pytest.mark.parametrize("fmt", ["fp8", "fp8-block", "fp8-channel", "nvfp4"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unit_overrides_decode_to_the_logical_values(fmt, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([32, 64, 96]))
    rows = rng.choice(n, size=5, replace=False)
    logical = np.full((n, n), np.nan)  # nan: not written by the overrides
    items = [(1, int(c), 0.0) for c in rng.choice(n, size=2, replace=False)]
    for c in (c for _, c, _ in items):
        logical[:, c] = 0.0
    for r in rows[:2]:  # a row of zeros
        items.append((0, int(r), 0.0))
        logical[r] = 0.0
    for r in rows[2:]:  # a unit row
        unit = np.zeros(n, dtype=np.float32)
        unit[rng.integers(n)] = 1.0
        items.append((0, int(r), unit))
        logical[r] = unit
    out = unit_overrides("w.weight", items, FORMATS[fmt])
    if fmt != "nvfp4":
        w = torch.full((n, n), 3.0, dtype=torch.float8_e4m3fn)  # 3: not written
        apply_overrides(w, (n, n), out["w.weight"])
        got = decode_e4m3(w.view(torch.uint8).numpy()) * UNIT_SCALE
    else:
        w = torch.full((n, n // 2), 0x55, dtype=torch.uint8)  # 0.5·2^-8 each: not written
        s = torch.full((n, n // 16), 1.0, dtype=torch.float8_e4m3fn)
        apply_overrides(w, (n, n // 2), out["w.weight"])
        apply_overrides(s, (n, n // 16), out.get("w.weight_scale", []))
        blocks = np.repeat(decode_e4m3(s.view(torch.uint8).numpy()), 16, axis=1)
        got = decode_e2m1_pairs(w.numpy()) * blocks * UNIT_SCALE
    written = ~np.isnan(logical)
    assert np.array_equal(got[written], logical[written])
    assert not np.any(got[~written] == 0), "an entry the overrides do not name was written"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nvfp4_neighbouring_columns_each_their_own_nibble(seed):
    """Two zeroed columns that share a byte, a zeroed column whose neighbour is not written, and
    unit rows: every byte is the one a numpy packing of the logical codes gives (the fill's
    codes where nothing is written; an even column's code the low nibble), in either order
    of the overrides."""
    rng = np.random.default_rng(seed)
    n = 64
    fill = rng.integers(0, 256, size=(n, n // 2), dtype=np.uint8)
    codes = np.empty((n, n), dtype=np.uint8)  # the logical e2m1 codes, column by column
    codes[:, 0::2], codes[:, 1::2] = fill & 0xF, fill >> 4
    pair = 2 * int(rng.integers(n // 2))  # columns pair and pair + 1: one byte
    alone = (pair + 2 * int(rng.integers(1, n // 2)) + int(rng.integers(2))) % n
    items = [(1, pair, 0.0), (1, pair + 1, 0.0), (1, alone, 0.0)]
    free = [c for c in range(n) if c not in (pair, pair + 1, alone)]
    for r in rng.choice(n, size=3, replace=False):
        unit = np.zeros(n, dtype=np.float32)
        unit[rng.choice(free)] = 1.0
        items.append((0, int(r), unit))
        codes[r] = np.where(unit == 1.0, 0b0010, 0)  # e2m1's 1.0
    codes[:, [pair, pair + 1, alone]] = 0
    want = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    for order in (items, items[::-1]):
        w = torch.from_numpy(fill.copy())
        out = unit_overrides("w.weight", order, FORMATS["nvfp4"])
        apply_overrides(w, (n, n // 2), out["w.weight"])
        assert np.array_equal(w.numpy(), want), order is items


def test_only_zeros_and_ones():
    with pytest.raises(ValueError, match="0 and 1"):
        unit_overrides("w.weight", [(0, 1, np.full(4, 0.5))], FORMATS["fp8"])
