// torch's per-element CPU transforms of one mt19937 word (docs/contract.md R4): uniform_'s
// float16 in the two formulas torch has used (kBits24: torch >= 2.12, FMA in its AVX2/AVX512
// kernels, not in DEFAULT; kBits11: torch <= 2.11), and random_'s byte, portable and AVX2.
#pragma once

#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/mt19937.h"

namespace fp8_dummy {
namespace cpu {

enum class Formula : int { kBits11 = 11, kBits24 = 24 };

// One of the uniform_ transforms torch has used (which one: fast_path.cpp's search).
struct Transform {
  Formula formula;
  bool fma;
  bool clamp;
};

struct UniformParams {
  uint32_t mask;
  float scale;  // 2^-bits: exact, so (r & mask) * scale is exact too
  float range;
  float low;
  bool fma;
  bool clamp;
  uint16_t to_bits;    // half(high): the value that is replaced (kBits24 only)
  uint16_t from_bits;  // half(low): its replacement
};

inline UniformParams make_uniform_params(double low, double high, const Transform& t) {
  UniformParams p{};
  p.fma = t.fma;
  p.clamp = t.clamp;
  // static_cast<c10::Half>(double) goes through float, as in torch's kernels.
  const c10::Half from_h(static_cast<float>(low)), to_h(static_cast<float>(high));
  p.to_bits = to_h.x;
  p.from_bits = from_h.x;
  if (t.formula == Formula::kBits24) {  // float bounds, their difference rounded to float
    p.mask = 0xFFFFFFu;
    p.scale = 1.0f / 16777216.0f;
    p.low = static_cast<float>(low);
    p.range = static_cast<float>(high) - p.low;
  } else {  // half bounds, their difference in c10's half arithmetic
    p.mask = 0x7FFu;
    p.scale = 1.0f / 2048.0f;
    p.low = static_cast<float>(from_h);
    p.range = static_cast<float>(c10::Half(to_h - from_h));
  }
  return p;
}

// Whether torch's 11-bit kernel refuses these bounds: half(to) - half(from) overflows.
inline bool bits11_range_overflows(double low, double high) {
  const c10::Half from_h(static_cast<float>(low));
  const c10::Half to_h(static_cast<float>(high));
  return std::isinf(static_cast<float>(c10::Half(to_h - from_h)));
}

inline bool half_equal(uint16_t a, uint16_t b) {
  return a == b || ((a | b) & 0x7FFFu) == 0;  // no NaN can occur: bounds are finite
}

// fmaf(x, y, z) for x * y exact in double, without an FMA instruction (std::fma is a slow
// call on baseline x86-64): the double sum made round-to-odd, so it rounds as the exact sum.
inline float fma_exact_product(float x, float y, float z) {
#if defined(__FP_FAST_FMAF) || defined(FP_FAST_FMAF)
  return std::fma(x, y, z);  // the target has an FMA instruction (aarch64, x86 with -mfma)
#endif
  const double a = static_cast<double>(x) * static_cast<double>(y);
  const double b = static_cast<double>(z);
  double s = a + b;
  const double bb = s - a;
  const double err = (a - (s - bb)) + (b - bb);
  if (err != 0.0) {
    uint64_t bits;
    std::memcpy(&bits, &s, sizeof bits);
    if ((bits & 1u) == 0) {
      // s != 0 here (a sum rounding to 0 is exact): its sign says which way is up.
      bits += ((err > 0.0) == (s > 0.0)) ? 1 : -1;
      std::memcpy(&s, &bits, sizeof bits);
    }
  }
  return static_cast<float>(s);
}

// `r` tempered. No contraction: the product is rounded to float before the add.
inline uint16_t transform_scalar(uint32_t r, const UniformParams& p) {
  const float x = static_cast<float>(r & p.mask) * p.scale;
  float v;
  if (p.fma) {
    v = fma_exact_product(x, p.range, p.low);
  } else {
    const float prod = static_cast<float>(static_cast<double>(x) * static_cast<double>(p.range));
    v = prod + p.low;
  }
  const uint16_t h = c10::Half(v).x;
  return p.clamp && half_equal(h, p.to_bits) ? p.from_bits : h;
}

inline void transform_block_scalar(const uint32_t* words, int64_t n, bool temper,
                                   const UniformParams& p, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = transform_scalar(temper ? mt_temper(words[i]) : words[i], p);
  }
}

#ifdef FP8_DUMMY_X86

// The parameters as vectors, once per block (the stores may alias UniformParams's fields).
struct UniformVectors {
  __m256i mask;
  __m256 scale, range, low;
  __m128i to, from;
};

__attribute__((target("avx2"))) inline UniformVectors make_uniform_vectors(const UniformParams& p) {
  return {_mm256_set1_epi32(static_cast<int>(p.mask)),
          _mm256_set1_ps(p.scale),
          _mm256_set1_ps(p.range),
          _mm256_set1_ps(p.low),
          _mm_set1_epi16(static_cast<int16_t>(p.to_bits)),
          _mm_set1_epi16(static_cast<int16_t>(p.from_bits))};
}

// kClamp: 0 none (kBits11); 1 half(high) nonzero: "equal" is "same bits"; 2 a zero (+-0).
template <bool kFma, int kClamp>
__attribute__((target("avx2,fma,f16c"))) inline __m128i transform8_avx2(__m256i r,
                                                                        const UniformVectors& p) {
  // Masked words are below 2^24: the conversion and the scaling are exact.
  const __m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(r, p.mask)), p.scale);
  __m256 v;
  if (kFma) {
    v = _mm256_fmadd_ps(x, p.range, p.low);
  } else {
    // GCC contracts even intrinsics into an FMA: the empty asm hides the rounded product.
    __m256 prod = _mm256_mul_ps(x, p.range);
    __asm__("" : "+x"(prod));
    v = _mm256_add_ps(prod, p.low);
  }
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  if (kClamp != 0) {
    __m128i hit = _mm_cmpeq_epi16(h, p.to);
    if (kClamp == 2) {
      hit = _mm_or_si128(
          hit, _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_setzero_si128()));
    }
    h = _mm_blendv_epi8(h, p.from, hit);
  }
  return h;
}

template <bool kFma, int kClamp>
__attribute__((target("avx2,fma,f16c"))) inline void transform_block_avx2_impl(
    const uint32_t* words, int64_t n, bool temper, const UniformParams& params, uint16_t* out) {
  const UniformVectors p = make_uniform_vectors(params);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + i));
    if (temper) r = mt_temper8_avx2(r);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), transform8_avx2<kFma, kClamp>(r, p));
  }
  if (i < n) {  // the tail through the same vector code, so it cannot differ
    alignas(32) uint32_t tail[8] = {};
    alignas(16) uint16_t res[8];
    for (int64_t j = i; j < n; ++j) tail[j - i] = words[j];
    __m256i r = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
    if (temper) r = mt_temper8_avx2(r);
    _mm_store_si128(reinterpret_cast<__m128i*>(res), transform8_avx2<kFma, kClamp>(r, p));
    for (int64_t j = i; j < n; ++j) out[j] = res[j - i];
  }
}

// The kClamp template argument p asks for (one rule for every SIMD level's dispatch table).
inline int clamp_variant(const UniformParams& p) {
  return !p.clamp ? 0 : (p.to_bits & 0x7FFF) ? 1 : 2;
}

inline void transform_block_avx2(const uint32_t* words, int64_t n, bool temper,
                                 const UniformParams& p, uint16_t* out) {
  using Fn = void (*)(const uint32_t*, int64_t, bool, const UniformParams&, uint16_t*);
  static constexpr Fn fns[2][3] = {
      {transform_block_avx2_impl<false, 0>, transform_block_avx2_impl<false, 1>,
       transform_block_avx2_impl<false, 2>},
      {transform_block_avx2_impl<true, 0>, transform_block_avx2_impl<true, 1>,
       transform_block_avx2_impl<true, 2>}};
  fns[p.fma][clamp_variant(p)](words, n, temper, p, out);
}

#endif  // FP8_DUMMY_X86

// ---- random_'s byte.

struct ByteParams {
  uint32_t range;  // to - from, in [1, 256]
  int32_t base;    // from
  bool pow2() const { return (range & (range - 1)) == 0; }
};

inline uint8_t random_byte(uint32_t tempered, const ByteParams& p) {
  return static_cast<uint8_t>(static_cast<uint32_t>(p.base) + tempered % p.range);
}

inline void bytes_block_scalar(const uint32_t* words, int64_t n, const ByteParams& p,
                               uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = random_byte(mt_temper(words[i]), p);
}

#ifdef FP8_DUMMY_X86

// A power-of-two range is a mask; the low bytes gathered by a shuffle and a permute.
__attribute__((target("avx2"))) inline void bytes_pow2_avx2(const uint32_t* words, int64_t n,
                                                            const ByteParams& p, uint8_t* out) {
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(p.range - 1));
  const __m256i base = _mm256_set1_epi32(p.base);
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -128, -128, -128, -128, -128, -128, -128, -128,
                                        -128, -128, -128, -128, 0, 4, 8, 12, -128, -128, -128, -128,
                                        -128, -128, -128, -128, -128, -128, -128, -128);
  const __m256i join = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i r = mt_temper8_avx2(load8(words + i));
    r = _mm256_add_epi32(_mm256_and_si256(r, mask), base);
    r = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(r, pick), join);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(r));
  }
  for (; i < n; ++i) out[i] = random_byte(mt_temper(words[i]), p);
}

inline void bytes_block_avx2(const uint32_t* words, int64_t n, const ByteParams& p, uint8_t* out) {
  if (p.pow2()) return bytes_pow2_avx2(words, n, p, out);
  bytes_block_scalar(words, n, p, out);  // a division per element: no SIMD form
}

#endif  // FP8_DUMMY_X86

}  // namespace cpu
}  // namespace fp8_dummy
