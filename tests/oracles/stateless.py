"""Independent numpy model of the stateless mode (fp8_dummy.init_stateless_).

Written from the rule measured on torch 2.14.1's CPU ``aten::_philox_uniform_`` (see
include/fp8_dummy/cuda/stateless.h): numpy Philox4x32-10 (oracles/cuda_reference.py), the
mantissa-digit masks, the per-dtype arithmetic in numpy float32/float64 (IEEE, never
fused), and the FP8 conversion by nearest-value search (cuda_reference.fp8_table).
"""

from __future__ import annotations

import numpy as np
import torch

from oracles.cuda_reference import MASK, fp8_table, philox

U64 = (1 << 64) - 1

FP8 = {
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e5m2: "float8_e5m2",
    torch.float8_e4m3fnuz: "float8_e4m3fnuz",
    torch.float8_e5m2fnuz: "float8_e5m2fnuz",
    torch.float8_e8m0fnu: "float8_e8m0fnu",
}
INTS = (torch.int8, torch.uint8)
WIDE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
NP_VIEW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def words(calls: np.ndarray, seed: int, key_offset: int) -> np.ndarray:
    """(len(calls), 4) uint64 words of Philox calls at counters key_offset + calls."""
    seed &= U64
    c = (calls.astype(np.uint64) + np.uint64(key_offset & U64)) & np.uint64(U64)
    zero = np.zeros_like(c)
    w = philox(c & MASK, c >> np.uint64(32), zero, zero, seed & 0xFFFFFFFF, seed >> 32)
    return np.stack(w, 1)


def _bf16_bits(f: np.ndarray) -> np.ndarray:
    b = np.asarray(f, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (
        (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    ).astype(np.uint16)


def _bf16_value(bits) -> np.float32:
    return (np.asarray(bits, dtype=np.uint32) << np.uint32(16)).view(np.float32)


def half_values(w: np.ndarray, low: float, high: float) -> np.ndarray:
    from_h = np.float16(np.float32(low))
    to_h = np.float16(np.float32(high))
    x = (w & np.uint64(0x7FF)).astype(np.float32) * np.float32(2.0**-11)
    # The range may overflow float16 to inf (then x = 0 gives NaN), as in torch's kernel.
    with np.errstate(over="ignore", invalid="ignore"):
        rng = np.float32(np.float16(np.float32(to_h) - np.float32(from_h)))
        return (x * rng + np.float32(from_h)).astype(np.float16)


def expected_bytes(
    e: np.ndarray,
    dtype: torch.dtype,
    low: float,
    high: float,
    seed: int,
    key_offset: int = 0,
    saturate: bool = True,
) -> np.ndarray:
    """The stored bit patterns (uint8/16/32/64) of global elements e."""
    e = np.asarray(e, dtype=np.uint64)
    per = 2 if dtype == torch.float64 else 4
    w = words(e // np.uint64(per), seed, key_offset)
    k = (e % np.uint64(per)).astype(np.int64)
    rows = np.arange(len(e))
    if dtype == torch.float64:
        hi, lo = w[rows, 2 * k], w[rows, 2 * k + 1]
        x = (((hi << np.uint64(32)) | lo) & np.uint64((1 << 53) - 1)).astype(np.float64) * 2.0**-53
        return (x * (np.float64(high) - np.float64(low)) + np.float64(low)).view(np.uint64)
    word = w[rows, k]
    if dtype in INTS:  # random_(from, to)'s reduction of a 32-bit draw, as a byte
        rng = int(high) - int(low)
        return ((word % np.uint64(rng)).astype(np.int64) + int(low)).astype(np.uint8)
    if dtype == torch.float32:
        x = (word & np.uint64(0xFFFFFF)).astype(np.float32) * np.float32(2.0**-24)
        f, t = np.float32(low), np.float32(high)
        return (x * (t - f) + f).view(np.uint32)
    if dtype == torch.bfloat16:
        f = _bf16_value(_bf16_bits(np.float32(low)))
        t = _bf16_value(_bf16_bits(np.float32(high)))
        rng = _bf16_value(_bf16_bits(t - f))
        x = (word & np.uint64(0xFF)).astype(np.float32) * np.float32(2.0**-8)
        return _bf16_bits(x * rng + f)
    halves = half_values(word, low, high)
    if dtype == torch.float16:
        return halves.view(np.uint16)
    return fp8_table(FP8[dtype], saturate)[halves.view(np.uint16)]


def e4m3fn_saturates() -> bool:
    """Whether the installed torch's CPU copy_ saturates float8_e4m3fn (>= 2.13) or makes
    NaN (<= 2.11)."""
    byte = torch.tensor([500.0], dtype=torch.float16).to(torch.float8_e4m3fn).view(torch.uint8)
    return int(byte) == 0x7E


def tensor_bits(t: torch.Tensor) -> np.ndarray:
    """Bit patterns of t's elements in logical row-major order."""
    c = t.contiguous().reshape(-1)
    return c.view(torch.uint8).numpy().view(NP_VIEW[t.element_size()]).copy()
