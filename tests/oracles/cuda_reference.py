"""An independent numpy model of torch's CUDA reference path (docs/contract.md R2, R3, R5).

Written from the specification, not from our C++ headers: Philox in numpy uint64
arithmetic, the uniform mapping in numpy float32/float16 with an exactly rounded fused
multiply-add, the launch split with an explicit stack like TensorIterator's, and the
FP8 conversions from oracles/cpu_reference.py (the formats' definitions, shared with the CPU model).
"""

from __future__ import annotations

import numpy as np

from oracles.cpu_reference import _fma_f32, half_to_fp8  # shared with the CPU model

MASK = np.uint64(0xFFFFFFFF)


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint64 arrays holding 32-bit values; returns 4 arrays."""
    c = [np.asarray(x, dtype=np.uint64) for x in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [
            (p1 >> np.uint64(32)) ^ c[1] ^ k0,
            p1 & MASK,
            (p0 >> np.uint64(32)) ^ c[3] ^ k1,
            p0 & MASK,
        ]
        if r < 9:
            k0 = (k0 + np.uint64(0x9E3779B9)) & MASK
            k1 = (k1 + np.uint64(0xBB67AE85)) & MASK
    return c


def half_bounds(low: float, high: float):
    """(from_h, to_h, range) as the kernel sees them: float16, float16, float32."""
    from_h = np.float16(np.float32(low))
    to_h = np.float16(np.float32(high))
    with np.errstate(over="ignore"):  # the range may overflow float16 to inf, as in the kernel
        rng = np.float32(np.float16(np.float32(to_h) - np.float32(from_h)))
    return from_h, to_h, rng


def uniform_halves_from_words(words: np.ndarray, low: float, high: float) -> np.ndarray:
    from_h, to_h, rng = half_bounds(low, high)
    # float(x) rounds once (exact via float64 for x < 2^32); * 2^-32 is exact; + 2^-33
    # rounds once in float32.
    u = words.astype(np.float64).astype(np.float32) * np.float32(2.0**-32) + np.float32(2.0**-33)
    v = _fma_f32(u, rng, np.float32(from_h)).astype(np.float16)
    v = np.where(v.astype(np.float32) == np.float32(to_h), from_h, v)
    return v.astype(np.float16)


def grid(n: int, sm: int, mt: int):
    blocks = min((n + 255) // 256, sm * (mt // 256))
    threads = blocks * 256
    return threads, 4 * ((n - 1) // (4 * threads) + 1)


def pieces(n: int):
    """TensorIterator's SplitUntil32Bit over a 1-D float16 iteration: (start, count)."""
    out, stack = [], [(0, n)]
    while stack:
        start, count = stack.pop()
        if 1 + 2 * (count - 1) <= 2**31 - 1:
            out.append((start, count))
        else:
            first = count // 2  # the first half is visited first
            stack.append((start + first, count - first))
            stack.append((start, first))
    return out


def launches(n: int, sm: int, mt: int, offset: int):
    """[(start, count, threads, offset used)], offset after."""
    _, inc = grid(n, sm, mt)
    offset += inc
    if n <= 2**30:
        return [(0, n, grid(n, sm, mt)[0], offset - inc)], offset
    out = []
    for start, count in pieces(n):
        threads, inc = grid(count, sm, mt)
        out.append((start, count, threads, offset))
        offset += inc
    return out, offset


def reference_halves(n, low, high, seed, offset, sm, mt):
    """float16 values of the reference temp in memory order, and the offset after."""
    out = np.empty(n, dtype=np.float16)
    runs, after = launches(n, sm, mt, offset)
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    for start, count, threads, used in runs:
        m = np.arange(count, dtype=np.uint64)
        idx = m % np.uint64(threads)
        q = m // np.uint64(threads)
        pos = np.uint64(used // 4) + q // np.uint64(4)
        w = philox(
            pos & MASK,
            pos >> np.uint64(32),
            idx & MASK,
            idx >> np.uint64(32),
            seed & 0xFFFFFFFF,
            seed >> 32,
        )
        ii = (q % np.uint64(4)).astype(np.int64)
        words = np.choose(ii, w)
        out[start : start + count] = uniform_halves_from_words(words, low, high)
    return out, after


# ---- float16 -> FP8 -----------------------------------------------------------------


# name: (exponent bits, mantissa bits, bias, fnuz, largest finite code)
def fp8_table(name: str, saturate: bool = True) -> np.ndarray:
    """FP8 byte for each of the 65536 float16 bit patterns (`saturate`: e4m3fn overflow
    saturates, as in torch >= 2.13; else NaN, as in torch 2.11's c10)."""
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    return half_to_fp8(halves, name, saturate)
