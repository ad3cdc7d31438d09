"""Independent numpy model of the reference path on the CPU (docs/contract.md R4, R5).

Nothing here calls torch's random or conversion code: the word stream comes from
numpy's legacy MT19937, the arithmetic from numpy's IEEE float32/float16 and an
exact fused multiply-add, the FP8 encodings from the formats' definitions.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
F64 = np.float64


def mt19937_words(seed: int, n: int, skip: int = 0) -> np.ndarray:
    """The 32-bit outputs of mt19937 seeded with init_genrand(seed & 0xffffffff)."""
    rs = np.random.RandomState(seed & 0xFFFFFFFF)  # legacy seeding = init_genrand
    words = rs.randint(0, 2**32, size=skip + n, dtype=np.uint64)  # one word per draw
    return words[skip:].astype(np.uint32)


def _fma_f32(a: np.ndarray, b: F32, c: F32) -> np.ndarray:
    """RN_f32(a*b + c) with one rounding, a and b float32 (so a*b is exact in float64).
    An infinite b (a float16 range that overflowed) gives inf, as fmaf does; the TwoSum
    correction then sees NaNs, which never select the other neighbour."""
    with np.errstate(invalid="ignore"):
        return _fma_f32_finite(a, b, c)


def _fma_f32_finite(a: np.ndarray, b: F32, c: F32) -> np.ndarray:
    p = a.astype(F64) * F64(b)
    c64 = np.full_like(p, F64(c))
    s = p + c64
    # Error-free TwoSum: s + e == p + c exactly.
    bb = s - p
    e = (p - (s - bb)) + (c64 - bb)
    f = s.astype(F32)
    d = s - f.astype(F64)
    # s may lie exactly halfway between two float32s while the exact sum does not:
    # then the exact sum rounds to the neighbour on e's side.
    other = np.nextafter(f, np.where(d > 0, F32(np.inf), F32(-np.inf)).astype(F32))
    tie = (d != 0) & ((other.astype(F64) - s) == d)
    toward_other = tie & (np.sign(e) == np.sign(d)) & (e != 0)
    return np.where(toward_other, other, f)


def cpu_uniform_half(
    words: np.ndarray, low: float, high: float, formula: str = "24bit", fma: bool = True
) -> np.ndarray:
    """float16 values torch's CPU uniform_ makes from the words (docs/contract.md R4)."""
    if formula == "24bit":  # torch >= 2.12
        x = (words & np.uint32(0xFFFFFF)).astype(F32) * F32(2.0**-24)
        lo, hi = F32(low), F32(high)
        rng = F32(hi - lo)
        v = _fma_f32(x, rng, lo) if fma else (x * rng) + lo
        h = v.astype(np.float16)
        h_hi, h_lo = np.float16(F32(high)), np.float16(F32(low))
        return np.where(h == h_hi, h_lo, h).astype(np.float16)
    # torch <= 2.11: 11 bits, bounds as half, range rounded to half, no clamp
    x = (words & np.uint32(0x7FF)).astype(F32) * F32(2.0**-11)
    from_h, to_h = np.float16(F32(low)), np.float16(F32(high))
    # A range that overflows half (torch's kernel refuses such bounds; its transform alone,
    # as the test operator runs it, gives inf and, for x = 0, NaN).
    with np.errstate(over="ignore", invalid="ignore"):
        rng = F32(np.float16(F32(to_h) - F32(from_h)))
        return ((x * rng) + F32(from_h)).astype(np.float16)


# (exponent bits, mantissa bits, bias, has negative zero and inf/NaN like IEEE?)
FORMATS = {
    "float8_e4m3fn": (4, 3, 7),
    "float8_e5m2": (5, 2, 15),
    "float8_e4m3fnuz": (4, 3, 8),
    "float8_e5m2fnuz": (5, 2, 16),
}
MAX_FINITE = {
    "float8_e4m3fn": 448.0,
    "float8_e5m2": 57344.0,
    "float8_e4m3fnuz": 240.0,
    "float8_e5m2fnuz": 57344.0,
}


def _round_to_format(a: np.ndarray, man: int, emin: int) -> np.ndarray:
    """Round |values| (float64, finite) to `man` mantissa bits, ties to even, with
    subnormals below 2**emin. Returns exact float64 results (may exceed the max)."""
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.maximum(e, emin)
    ulp = np.exp2(e - man)
    return np.round(a / ulp) * ulp  # np.round is round-half-even; a/ulp is exact


def _encode(r: np.ndarray, neg: np.ndarray, exp_bits: int, man: int, bias: int) -> np.ndarray:
    """Bit pattern of finite, representable magnitudes r with sign neg."""
    emin = 1 - bias
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(r > 0, r, 1.0))).astype(np.int64)
    normal = (r >= 2.0**emin) & (r > 0)
    biased = np.where(normal, e + bias, 0)
    frac = np.where(normal, r / np.exp2(e) - 1.0, r / 2.0**emin)
    mant = np.round(frac * (1 << man)).astype(np.int64)
    code = (biased << man) | mant
    return (code | np.where(neg, 1 << (exp_bits + man), 0)).astype(np.uint8)


def half_to_int8(h: np.ndarray, dtype: str, saturate: bool = False) -> np.ndarray:
    """int8/uint8 bytes from float16 values: C's float -> integer conversion, truncation
    toward zero (the values TensorRT-LLM's ``.to(dtype)`` keeps), then outside the type's
    range either modulo 256 (torch's CPU copy_: through a wider integer) or clamped
    (``saturate``: a direct 8-bit conversion instruction). Finite inputs only."""
    whole = np.trunc(np.asarray(h, dtype=np.float16).astype(F64)).astype(np.int64)
    if saturate:
        lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
        whole = np.clip(whole, lo, hi)
    return (whole % 256).astype(np.uint8)


def half_to_fp8(h: np.ndarray, dtype: str, saturate_e4m3fn: bool = True) -> np.ndarray:
    """FP8 bytes torch's copy_ makes from float16 values (docs/contract.md R5); "int8" and
    "uint8" as torch's CPU copy_ makes them (:func:`half_to_int8`, modulo 256)."""
    if dtype in ("int8", "uint8"):
        return half_to_int8(h, dtype)
    h = np.asarray(h, dtype=np.float16)
    v = h.astype(F64)
    nan, inf = np.isnan(v), np.isinf(v)
    neg = np.signbit(v)
    a = np.where(nan | inf, 0.0, np.abs(v))
    if dtype == "float8_e8m0fnu":
        # Powers of two 2**(code-127); sign dropped; a mantissa of exactly one half
        # rounds up (torch's copy_ does, for odd and even exponents alike).
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
        m = a / np.exp2(e) - 1.0
        up = m >= 0.5
        code = np.where(a > 0, e + up + 127, 0)
        return np.where(nan | inf, 0xFF, code).astype(np.uint8)
    exp_bits, man, bias = FORMATS[dtype]
    r = _round_to_format(a, man, 1 - bias)
    big = r > MAX_FINITE[dtype]
    out = _encode(np.where(big, 0.0, r), neg, exp_bits, man, bias)
    sign = np.where(neg, 0x80, 0).astype(np.uint8)
    if dtype == "float8_e4m3fn":
        if saturate_e4m3fn:  # torch >= 2.13: overflow and inf saturate, NaN -> NaN, sign kept
            out = np.where(big | inf, sign | 0x7E, out)
            return np.where(nan, sign | 0x7F, out).astype(np.uint8)
        # torch <= 2.11: above 464 (inf too) -> NaN with the sign kept
        return np.where(big | inf | nan, sign | 0x7F, out).astype(np.uint8)
    if dtype == "float8_e5m2":
        out = np.where(big | inf, sign | 0x7C, out)
        return np.where(nan, sign | 0x7F, out).astype(np.uint8)
    # fnuz: no negative zero, one NaN (0x80) for overflow, inf and NaN.
    out = np.where((r == 0), 0, out)
    return np.where(big | inf | nan, 0x80, out).astype(np.uint8)


def temp_positions(shape: tuple[int, ...], temp_strides: tuple[int, ...]) -> np.ndarray:
    """For each logical element, its position in the float16 temp's memory."""
    pos = np.zeros(shape, dtype=np.int64)
    for d, (size, stride) in enumerate(zip(shape, temp_strides)):
        idx_shape = [1] * len(shape)
        idx_shape[d] = size
        pos = pos + (np.arange(size, dtype=np.int64) * stride).reshape(idx_shape)
    return pos


def reference_bytes(
    shape: tuple[int, ...],
    temp_strides: tuple[int, ...],
    dtype: str,
    seed: int,
    low: float,
    high: float,
    formula: str = "24bit",
    fma: bool = True,
    saturate_e4m3fn: bool = True,
) -> np.ndarray:
    """Logical-order bytes of the reference new path for an FP8 tensor."""
    n = int(np.prod(shape, dtype=np.int64))
    halves = cpu_uniform_half(mt19937_words(seed, n), low, high, formula, fma)
    logical = halves[temp_positions(shape, temp_strides)] if n else halves.reshape(shape)
    return half_to_fp8(logical, dtype, saturate_e4m3fn)
