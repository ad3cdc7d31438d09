// float16 -> one byte as torch's copy_ converts, bit level: the five FP8 dtypes (c10's
// Float8_* constructors, or the sm_89+ instructions where they agree; out of range differs:
// docs/contract.md R5) and int8/uint8 (TensorRT-LLM's temp: truncation toward zero, out of
// range per device, docs/engines.md). Torch-free, host and device.
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8_dummy/cuda/config.h"

#if FP8_DUMMY_HW_FP8
#include <cuda_fp8.h>
#endif

namespace fp8_dummy {
namespace cuda {

// The 1-byte outputs of a float16 temp: the five FP8 dtypes, then int8 and uint8.
enum class Fp8Format : int {
  kE4m3fn = 0,
  kE5m2 = 1,
  kE4m3fnuz = 2,
  kE5m2fnuz = 3,
  kE8m0fnu = 4,
  kInt8 = 5,
  kUint8 = 6
};
constexpr int kNumFp8Formats = 7;

FP8_DUMMY_HD constexpr bool is_integer_format(Fp8Format f) {
  return f == Fp8Format::kInt8 || f == Fp8Format::kUint8;
}

// What a value outside the format's range becomes, where the torch version or device decides.
// float8_e4m3fn: saturation to +-448 (c10 since 2.12/2.13, sm_89+ `satfinite`) or NaN above
// 464 (c10 up to 2.11). int8/uint8: kWrap, modulo 256 (through a wider integer: torch's CPU
// copy_, c10's uint8), or kSaturate, clamped (a direct float -> 8-bit instruction); a probe of
// torch's conversion picks per device. Other FP8 formats: one behaviour (kSaturate).
enum class E4m3fnOverflow : int { kSaturate = 0, kNan = 1, kWrap = 2 };

// |h| rounded to nearest even onto a binary format with `mant_bits` mantissa bits and
// smallest normal exponent `min_exp`, returned as the encoding exponent_field <<
// mant_bits | mantissa (exponent field 0 = subnormal), unbounded above: the caller
// decides what too large an encoding means. h must be finite.
FP8_DUMMY_HD uint32_t round_half_magnitude(uint16_t h, int mant_bits, int min_exp) {
  const int exp_field = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  // |h| = sig * 2^(scale), sig < 2^11.
  const uint32_t sig = exp_field ? (mant | 0x400u) : mant;
  if (sig == 0) return 0;
  const int scale = (exp_field ? exp_field : 1) - 25;
  int top = 10;  // floor(log2(sig))
  while (!(sig >> top)) --top;
  const int exponent = scale + top;  // floor(log2(|h|))
  const bool normal = exponent >= min_exp;
  // Quantum of the target at this magnitude: 2^(max(exponent, min_exp) - mant_bits).
  const int quantum = (normal ? exponent : min_exp) - mant_bits;
  uint32_t steps;  // |h| / quantum, rounded to nearest even
  if (scale >= quantum) {
    steps = sig << (scale - quantum);
  } else {
    const int shift = quantum - scale;
    if (shift > 12) return 0;  // below half a quantum (sig < 2^11)
    steps = sig >> shift;
    const uint32_t rest = sig & ((1u << shift) - 1);
    const uint32_t half_way = 1u << (shift - 1);
    if (rest > half_way || (rest == half_way && (steps & 1u))) ++steps;
  }
  if (!normal) return steps;  // 2^mant_bits steps is the smallest normal: same encoding
  // steps in [2^m, 2^(m+1)]; the implicit bit and a rounding carry both add into the
  // exponent field.
  const uint32_t field = static_cast<uint32_t>(exponent - min_exp);
  return (field << mant_bits) + steps;
}

FP8_DUMMY_HD uint8_t half_to_e4m3fn(uint16_t h, E4m3fnOverflow overflow) {
  const uint8_t sign = static_cast<uint8_t>((h >> 8) & 0x80u);
  const uint16_t mag = h & 0x7fffu;
  if (mag > 0x7c00u) return sign | 0x7f;  // NaN stays NaN, sign kept (as c10)
  const bool saturate = overflow == E4m3fnOverflow::kSaturate;
  if (mag == 0x7c00u) return sign | (saturate ? 0x7e : 0x7f);
  const uint32_t enc = round_half_magnitude(mag, 3, -6);
  if (enc > 0x7eu) return sign | (saturate ? 0x7e : 0x7f);  // 0x7f is NaN, 0x7e = 448
  return sign | static_cast<uint8_t>(enc);
}

FP8_DUMMY_HD uint8_t half_to_e5m2(uint16_t h) {
  const uint8_t sign = static_cast<uint8_t>((h >> 8) & 0x80u);
  const uint16_t mag = h & 0x7fffu;
  if (mag > 0x7c00u) return sign | 0x7f;
  if (mag == 0x7c00u) return sign | 0x7c;
  const uint32_t enc = round_half_magnitude(mag, 2, -14);
  return sign | static_cast<uint8_t>(enc >= 0x7cu ? 0x7cu : enc);  // overflow: inf
}

// The fnuz formats have no negative zero, no infinity and a single NaN, 0x80, which
// is also where every overflow, infinity and NaN goes.
FP8_DUMMY_HD uint8_t half_to_fnuz(uint16_t h, int mant_bits, int min_exp) {
  const uint8_t sign = static_cast<uint8_t>((h >> 8) & 0x80u);
  const uint16_t mag = h & 0x7fffu;
  if (mag >= 0x7c00u) return 0x80;
  const uint32_t enc = round_half_magnitude(mag, mant_bits, min_exp);
  if (enc > 0x7fu) return 0x80;
  return enc == 0 ? 0 : (sign | static_cast<uint8_t>(enc));
}

// float8_e8m0fnu: a biased power of two (0x00 = 2^-127, 0xff = NaN), no sign. The
// float's exponent field, plus one when the mantissa is at least one half (ties to
// even: a normal float's implicit bit is odd); zero gives 0x00, inf and NaN 0xff.
FP8_DUMMY_HD uint8_t half_to_e8m0fnu(uint16_t h) {
  const uint16_t mag = h & 0x7fffu;
  if (mag >= 0x7c00u) return 0xff;
  if (mag == 0) return 0x00;
  const int exp_field = mag >> 10;
  uint32_t sig = exp_field ? (mag & 0x3ffu) | 0x400u : mag;
  int exponent = (exp_field ? exp_field : 1) - 25;  // |h| = sig * 2^exponent
  int top = 10;
  while (!(sig >> top)) --top;
  exponent += top;
  const bool round_up = top > 0 && ((sig >> (top - 1)) & 1u);
  return static_cast<uint8_t>(exponent + 127 + (round_up ? 1 : 0));
}

// int8 (is_signed) or uint8: the finite half h truncated toward zero, then wrapped modulo
// 256 or clamped (`overflow`). |h| <= 65504, so the integer part fits in 32 bits.
FP8_DUMMY_HD uint8_t half_to_int8(uint16_t h, bool is_signed, E4m3fnOverflow overflow) {
  const int exp_field = (h >> 10) & 0x1f;
  if (exp_field == 0x1f) return 0;  // inf, NaN: never drawn by uniform_ (not modelled)
  const uint32_t sig = exp_field ? (h & 0x3ffu) | 0x400u : (h & 0x3ffu);
  const int scale = (exp_field ? exp_field : 1) - 25;  // |h| = sig * 2^scale
  const int32_t whole = scale >= 0    ? static_cast<int32_t>(sig << scale)
                        : scale > -11 ? static_cast<int32_t>(sig >> -scale)
                                      : 0;
  const int32_t v = (h & 0x8000u) ? -whole : whole;
  if (overflow == E4m3fnOverflow::kSaturate) {
    const int32_t lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
    return static_cast<uint8_t>(v < lo ? lo : v > hi ? hi : v);
  }
  return static_cast<uint8_t>(static_cast<uint32_t>(v) & 0xffu);
}

FP8_DUMMY_HD uint8_t half_to_fp8(uint16_t h, Fp8Format format, E4m3fnOverflow overflow) {
  switch (format) {
    case Fp8Format::kInt8:
      return half_to_int8(h, true, overflow);
    case Fp8Format::kUint8:
      return half_to_int8(h, false, overflow);
    case Fp8Format::kE4m3fn:
      return half_to_e4m3fn(h, overflow);
    case Fp8Format::kE5m2:
      return half_to_e5m2(h);
    case Fp8Format::kE4m3fnuz:
      return half_to_fnuz(h, 3, -7);
    case Fp8Format::kE5m2fnuz:
      return half_to_fnuz(h, 2, -15);
    default:
      return half_to_e8m0fnu(h);
  }
}

// The sm_89+ pair conversion (cvt.rn.satfinite.{e4m3,e5m2}x2.f16x2) gives the software bytes
// while |value| <= hw_limit (0: no hardware path); the host checks the call's bounds against it.
FP8_DUMMY_HD float hw_limit(Fp8Format format, E4m3fnOverflow overflow) {
  switch (format) {
    case Fp8Format::kE4m3fn:
      return overflow == E4m3fnOverflow::kSaturate ? 65504.0f : 448.0f;
    case Fp8Format::kE5m2:
      return 57344.0f;
    default:
      return 0.0f;
  }
}

FP8_DUMMY_HD bool hw_conversion_ok(Fp8Format format, E4m3fnOverflow overflow, float max_abs) {
  return max_abs <= hw_limit(format, overflow) && hw_limit(format, overflow) > 0.0f;
}

// Two halves (low 16 bits first) to two FP8 bytes (low byte first).
template <Fp8Format F>
FP8_DUMMY_HD uint16_t half2_to_fp8x2(uint32_t halves, bool use_hw, E4m3fnOverflow overflow) {
#if FP8_DUMMY_HW_FP8
  if (F == Fp8Format::kE4m3fn || F == Fp8Format::kE5m2) {
    if (use_hw) {
      __half2_raw pair;  // x the low half: the bits as they are, no shift
      memcpy(&pair, &halves, sizeof(pair));
      return __nv_cvt_halfraw2_to_fp8x2(pair, __NV_SATFINITE,
                                        F == Fp8Format::kE4m3fn ? __NV_E4M3 : __NV_E5M2);
    }
  }
#endif
  (void)use_hw;
  const uint16_t lo = half_to_fp8(static_cast<uint16_t>(halves), F, overflow);
  const uint16_t hi = half_to_fp8(static_cast<uint16_t>(halves >> 16), F, overflow);
  return static_cast<uint16_t>(lo | (hi << 8));
}

}  // namespace cuda
}  // namespace fp8_dummy
