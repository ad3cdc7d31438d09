// Per-element transform of torch's CPU random_(from, to) for 8-bit integer tensors: one
// 32-bit mt19937 output per element (torch draws random() while to - from < 2^28, always
// true here), value = from + (word % (to - from)), cast to the 8-bit type (ATen's
// uniform_int_from_to: static_cast<T>(int64_t(word % range + base))). The cast keeps the
// low byte, so the byte is (from + word % range) mod 256 for int8 and uint8 alike.
// Portable and AVX2 forms here; AVX-512 in mt19937_avx512.h.
#pragma once

#include <cstdint>

#include "cpu/mt19937_simd.h"

namespace fp8_dummy {
namespace cpu {

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

// A power-of-two range is a mask; (base + masked word) then keeps its low byte, gathered by
// a byte shuffle within each 128-bit lane and a dword permute across them.
__attribute__((target("avx2"))) inline void bytes_pow2_avx2(const uint32_t* words, int64_t n,
                                                            const ByteParams& p, uint8_t* out) {
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(p.range - 1));
  const __m256i base = _mm256_set1_epi32(p.base);
  // Bytes 0, 4, 8, 12 of each lane to its first dword; the rest zeroed (index 0x80).
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
