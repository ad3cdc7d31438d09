// float16 -> FP8 in registers (AVX2), for the four sign/exponent/mantissa FP8 formats, for
// values of magnitude at most the format's largest finite value. Within that range every
// torch version rounds to nearest even from the exact half value (docs/contract.md R5); above
// it, where versions differ, the caller keeps the table built from torch's own copy_.
// Before it is used for a dtype, the conversion is compared with that table on every
// half value in range (fp8_direct_ok), so a disagreement can only cost speed.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <mutex>

#include "cpu/mt19937_simd.h"

namespace fp8_dummy {
namespace cpu {

struct Fp8Format {
  bool supported = false;  // false: e8m0 (or not FP8): table only
  int man_bits = 0;
  int bias = 0;
  bool fnuz = false;        // no negative zero: a zero result drops the sign
  double max_finite = 0.0;  // largest finite magnitude
  int slot = 0;
  double min_normal() const { return std::ldexp(1.0, 1 - bias); }
};

inline Fp8Format fp8_format(c10::ScalarType dtype) {
  Fp8Format f;
  f.supported = true;
  switch (dtype) {
    case c10::ScalarType::Float8_e4m3fn:
      f.man_bits = 3, f.bias = 7, f.max_finite = 448.0, f.slot = 0;
      break;
    case c10::ScalarType::Float8_e5m2:
      f.man_bits = 2, f.bias = 15, f.max_finite = 57344.0, f.slot = 1;
      break;
    case c10::ScalarType::Float8_e4m3fnuz:
      f.man_bits = 3, f.bias = 8, f.fnuz = true, f.max_finite = 240.0, f.slot = 2;
      break;
    case c10::ScalarType::Float8_e5m2fnuz:
      f.man_bits = 2, f.bias = 16, f.fnuz = true, f.max_finite = 57344.0, f.slot = 3;
      break;
    default:
      f.supported = false;
      break;
  }
  return f;
}

#ifdef FP8_DUMMY_X86

// 8 halves -> 8 FP8 bytes at dst, for a format with M mantissa bits and exponent bias B.
// Only for halves with |h| <= the format's largest finite value; with kTiny, only for
// |h| <= its smallest normal value 2^(1-B) (the default bounds +-1e-3 in e4m3fn, say),
// where the subnormal rule alone gives every result.
template <int M, int B, bool kFnuz, bool kTiny>
__attribute__((target("avx2,f16c"))) inline void fp8_from_half8_avx2(__m128i h, uint8_t* dst) {
  constexpr int kShift = 23 - M;
  const __m256i bits = _mm256_castps_si256(_mm256_cvtph_ps(h));  // exact
  const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(INT32_MIN)), 24);
  const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(INT32_MAX));
  const __m256 a = _mm256_castsi256_ps(mag);
  // Subnormal results (below the smallest normal, 2^(1-B)): the count of smallest
  // subnormals (2^(1-B-M)), rounded to nearest even; a count of 2^M is the code of the
  // smallest normal, as it should be.
  const __m256 inv_unit = _mm256_castsi256_ps(_mm256_set1_epi32((127 + B + M - 1) << 23));
  const __m256 count = _mm256_round_ps(_mm256_mul_ps(a, inv_unit),  // power of two: exact
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i code = _mm256_cvttps_epi32(count);
  if (!kTiny) {
    // Normal results: round the float's bits to M mantissa bits, nearest even (a carry into
    // the exponent gives the right result), then rebias the exponent.
    __m256i r = _mm256_add_epi32(mag, _mm256_set1_epi32((1 << (kShift - 1)) - 1));
    r = _mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(mag, kShift), _mm256_set1_epi32(1)));
    const __m256i normal =
        _mm256_sub_epi32(_mm256_srli_epi32(r, kShift), _mm256_set1_epi32((127 - B) << M));
    const __m256 min_normal = _mm256_castsi256_ps(_mm256_set1_epi32((127 + 1 - B) << 23));
    const __m256i tiny = _mm256_castps_si256(_mm256_cmp_ps(a, min_normal, _CMP_LT_OQ));
    code = _mm256_blendv_epi8(normal, code, tiny);
  }
  __m256i s = sign;
  if (kFnuz) s = _mm256_andnot_si256(_mm256_cmpeq_epi32(code, _mm256_setzero_si256()), s);
  code = _mm256_or_si256(code, s);
  const __m128i words =
      _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(words, words));
}

template <int M, int B, bool kFnuz, bool kTiny>
__attribute__((target("avx2,f16c"))) inline void fp8_from_halves_avx2_impl(const uint16_t* h,
                                                                           int64_t n,
                                                                           uint8_t* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    fp8_from_half8_avx2<M, B, kFnuz, kTiny>(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)), dst + i);
  }
  if (i < n) {  // the tail through the same code
    alignas(16) uint16_t in[8] = {};
    uint8_t out[8];
    for (int64_t j = i; j < n; ++j) in[j - i] = h[j];
    fp8_from_half8_avx2<M, B, kFnuz, kTiny>(_mm_load_si128(reinterpret_cast<const __m128i*>(in)),
                                            out);
    for (int64_t j = i; j < n; ++j) dst[j] = out[j - i];
  }
}

template <bool kTiny>
inline void fp8_from_halves_avx2_tmpl(const uint16_t* h, int64_t n, const Fp8Format& f,
                                      uint8_t* dst) {
  switch (f.slot) {
    case 0:
      return fp8_from_halves_avx2_impl<3, 7, false, kTiny>(h, n, dst);
    case 1:
      return fp8_from_halves_avx2_impl<2, 15, false, kTiny>(h, n, dst);
    case 2:
      return fp8_from_halves_avx2_impl<3, 8, true, kTiny>(h, n, dst);
    default:
      return fp8_from_halves_avx2_impl<2, 16, true, kTiny>(h, n, dst);
  }
}

inline void fp8_from_halves_avx2(const uint16_t* h, int64_t n, const Fp8Format& f, bool tiny,
                                 uint8_t* dst) {
  tiny ? fp8_from_halves_avx2_tmpl<true>(h, n, f, dst)
       : fp8_from_halves_avx2_tmpl<false>(h, n, f, dst);
}

// Whether both forms above equal `table` (torch's copy_) on every half in their ranges.
// Checked once per dtype and process.
inline bool fp8_direct_ok(const Fp8Format& f, const uint8_t* table) {
  static bool ok[4];
  static std::once_flag once[4];
  if (!f.supported) return false;
  std::call_once(once[f.slot], [&] {
    alignas(16) uint16_t h[8];
    uint8_t out[8], out_tiny[8];
    bool all = true;
    for (uint32_t base = 0; base < 65536 && all; base += 8) {
      for (uint32_t j = 0; j < 8; ++j) h[j] = static_cast<uint16_t>(base + j);
      fp8_from_halves_avx2(h, 8, f, /*tiny=*/false, out);
      fp8_from_halves_avx2(h, 8, f, /*tiny=*/true, out_tiny);
      for (uint32_t j = 0; j < 8; ++j) {
        const double v = std::abs(static_cast<float>(c10::Half(h[j], c10::Half::from_bits())));
        if (v <= f.max_finite) all = all && out[j] == table[h[j]];  // NaN, inf: table
        if (v <= f.min_normal()) all = all && out_tiny[j] == table[h[j]];
      }
    }
    ok[f.slot] = all;
  });
  return ok[f.slot];
}

#endif  // FP8_DUMMY_X86

}  // namespace cpu
}  // namespace fp8_dummy
