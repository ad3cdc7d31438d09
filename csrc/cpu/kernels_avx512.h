// The AVX-512 level of the CPU kernels (16 lanes), mirroring the AVX2 forms line for line
// (mt19937.h, transforms.h, fp8_bytes.h); also run over SIMDe (tests/consumers/).
#pragma once

#include <cstdint>

#include "cpu/fp8_bytes.h"
#include "cpu/mt19937.h"
#include "cpu/transforms.h"

namespace fp8_dummy {
namespace cpu {

#ifdef FP8_DUMMY_X86

// Both predefined by the SIMDe build.
#ifndef FP8_DUMMY_TARGET_AVX512
#define FP8_DUMMY_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#endif
#ifndef FP8_DUMMY_OPAQUE_512
#define FP8_DUMMY_OPAQUE_512(x) __asm__("" : "+v"(x))
#endif

// GCC's avx512fintrin.h trips uninitialized-value warnings (_mm512_undefined_*).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

FP8_DUMMY_TARGET_AVX512 inline __m512i load16(const uint32_t* p) { return _mm512_loadu_si512(p); }

FP8_DUMMY_TARGET_AVX512 inline __m512i mt_twist16_avx512(__m512i far, __m512i u, __m512i v) {
  // Bit select: the top bit from u, the rest from v (0xE4: c ? a : b, c the upper mask).
  const __m512i y = _mm512_ternarylogic_epi32(u, v, _mm512_set1_epi32(int(kMtUpper)), 0xE4);
  const __mmask16 odd = _mm512_test_epi32_mask(v, _mm512_set1_epi32(1));
  const __m512i mag = _mm512_maskz_mov_epi32(odd, _mm512_set1_epi32(int(kMtMatrixA)));
  return _mm512_ternarylogic_epi32(far, _mm512_srli_epi32(y, 1), mag, 0x96);  // a ^ b ^ c
}

// As mt_twist_avx2 with 16 lanes.
FP8_DUMMY_TARGET_AVX512 inline void mt_twist_avx512(const uint32_t* old, uint32_t* out) {
  int i = 0;
  for (; i + 16 <= kMtN - kMtM; i += 16) {  // 0 .. 223: far words old
    _mm512_storeu_si512(
        out + i, mt_twist16_avx512(load16(old + i + kMtM), load16(old + i), load16(old + i + 1)));
  }
  for (; i < kMtN - kMtM + 5; ++i) out[i] = mt_new_word(old, out, i);  // 224 .. 231
  for (; i + 16 < kMtN; i += 16) {  // 232 .. 615: far words new (i + 16 < 624: keep 623 out)
    _mm512_storeu_si512(out + i, mt_twist16_avx512(load16(out + i + kMtM - kMtN), load16(old + i),
                                                   load16(old + i + 1)));
  }
  for (; i < kMtN; ++i) out[i] = mt_new_word(old, out, i);  // the rest, 623 last
}

FP8_DUMMY_TARGET_AVX512 inline __m512i mt_temper16_avx512(__m512i y) {
  y = _mm512_xor_si512(y, _mm512_srli_epi32(y, 11));
  y = _mm512_xor_si512(
      y, _mm512_and_si512(_mm512_slli_epi32(y, 7), _mm512_set1_epi32(int(0x9d2c5680u))));
  y = _mm512_xor_si512(
      y, _mm512_and_si512(_mm512_slli_epi32(y, 15), _mm512_set1_epi32(int(0xefc60000u))));
  return _mm512_xor_si512(y, _mm512_srli_epi32(y, 18));
}

// transform8_avx2 with 16 lanes; the 16-bit clamp on the 256-bit halves, as there.
template <bool kFma, int kClamp>
FP8_DUMMY_TARGET_AVX512 inline __m256i transform16_avx512(__m512i r, const UniformParams& params) {
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(params.mask));
  const __m512 x =
      _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(r, mask)), _mm512_set1_ps(params.scale));
  __m512 v;
  if (kFma) {
    v = _mm512_fmadd_ps(x, _mm512_set1_ps(params.range), _mm512_set1_ps(params.low));
  } else {
    __m512 prod = _mm512_mul_ps(x, _mm512_set1_ps(params.range));
    FP8_DUMMY_OPAQUE_512(prod);  // no contraction into an FMA (see transform8_avx2)
    v = _mm512_add_ps(prod, _mm512_set1_ps(params.low));
  }
  __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  if (kClamp != 0) {
    const __m256i to = _mm256_set1_epi16(static_cast<int16_t>(params.to_bits));
    __m256i hit = _mm256_cmpeq_epi16(h, to);
    if (kClamp == 2) {
      hit = _mm256_or_si256(hit, _mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                                    _mm256_setzero_si256()));
    }
    h = _mm256_blendv_epi8(h, _mm256_set1_epi16(static_cast<int16_t>(params.from_bits)), hit);
  }
  return h;
}

template <bool kFma, int kClamp>
FP8_DUMMY_TARGET_AVX512 inline void transform_block_avx512_impl(const uint32_t* words, int64_t n,
                                                                bool temper, const UniformParams& p,
                                                                uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i r = load16(words + i);
    if (temper) r = mt_temper16_avx512(r);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        transform16_avx512<kFma, kClamp>(r, p));
  }
  if (i < n) {  // the tail through the same code
    alignas(64) uint32_t tail[16] = {};
    alignas(32) uint16_t res[16];
    for (int64_t j = i; j < n; ++j) tail[j - i] = words[j];
    __m512i r = _mm512_load_si512(tail);
    if (temper) r = mt_temper16_avx512(r);
    _mm256_store_si256(reinterpret_cast<__m256i*>(res), transform16_avx512<kFma, kClamp>(r, p));
    for (int64_t j = i; j < n; ++j) out[j] = res[j - i];
  }
}

inline void transform_block_avx512(const uint32_t* words, int64_t n, bool temper,
                                   const UniformParams& p, uint16_t* out) {
  using Fn = void (*)(const uint32_t*, int64_t, bool, const UniformParams&, uint16_t*);
  static constexpr Fn fns[2][3] = {
      {transform_block_avx512_impl<false, 0>, transform_block_avx512_impl<false, 1>,
       transform_block_avx512_impl<false, 2>},
      {transform_block_avx512_impl<true, 0>, transform_block_avx512_impl<true, 1>,
       transform_block_avx512_impl<true, 2>}};
  fns[p.fma][clamp_variant(p)](words, n, temper, p, out);
}

// A power-of-two range: base + (word & mask), vpmovdb keeping the low byte (mod 256).
FP8_DUMMY_TARGET_AVX512 inline void bytes_pow2_avx512(const uint32_t* words, int64_t n,
                                                      const ByteParams& p, uint8_t* out) {
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(p.range - 1));
  const __m512i base = _mm512_set1_epi32(p.base);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i r = _mm512_and_si512(mt_temper16_avx512(load16(words + i)), mask);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm512_cvtepi32_epi8(_mm512_add_epi32(r, base)));
  }
  for (; i < n; ++i) out[i] = random_byte(mt_temper(words[i]), p);
}

inline void bytes_block_avx512(const uint32_t* words, int64_t n, const ByteParams& p,
                               uint8_t* out) {
  if (p.pow2()) return bytes_pow2_avx512(words, n, p, out);
  bytes_block_scalar(words, n, p, out);  // a division per element: no SIMD form
}

// FP8 bytes from the runs (fp8_bytes.h): a masked add per breakpoint, vpmovdb to bytes.
FP8_DUMMY_TARGET_AVX512 inline void runs_block_avx512(const uint32_t* words, int64_t n,
                                                      uint32_t mask, const Fp8Runs& r,
                                                      uint8_t* out) {
  const __m512i m = _mm512_set1_epi32(static_cast<int>(mask));
  __m512i start[kMaxBreaks], delta[kMaxBreaks];
  for (int k = 0; k < r.breaks; ++k) {
    start[k] = _mm512_set1_epi32(static_cast<int>(r.start[k]));
    delta[k] = _mm512_set1_epi32(r.delta[k]);
  }
  const __m512i first = _mm512_set1_epi32(r.first);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_and_si512(mt_temper16_avx512(load16(words + i)), m);
    __m512i a = first;
    for (int k = 0; k < r.breaks; ++k) {
      a = _mm512_mask_add_epi32(a, _mm512_cmpge_epu32_mask(x, start[k]), a, delta[k]);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(a));
  }
  runs_block_scalar(words + i, n - i, mask, r, out + i);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // FP8_DUMMY_X86

}  // namespace cpu
}  // namespace fp8_dummy
