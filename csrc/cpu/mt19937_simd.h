// The mt19937 block step ("twist") and output tempering, in a portable scalar form and an
// AVX2 form that gives the same words. Written from the algorithm's definition (Matsumoto &
// Nishimura 1998) as torch's at::mt19937 runs it: the state is 624 words; a block step
// rewrites all of them in order, word i from words i, i+1 and i+397 (indices mod 624, words
// already rewritten in this step taking part with their new values); the outputs are the
// tempered words of the new state, in order.
//
// The twist here is out of place (old block -> new block), so the caller can keep a ring of
// consecutive blocks and temper/transform them in other threads while the next ones are made.
#pragma once

#include <cstdint>
#include <cstring>

// The SIMD forms need GCC/Clang (target attributes, __builtin_cpu_supports) on x86-64;
// everything else takes the portable forms. -DFP8_DUMMY_NO_SIMD builds that way on x86-64
// too (to test what other architectures run).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FP8_DUMMY_NO_SIMD)
#include <immintrin.h>
#define FP8_DUMMY_X86 1
#endif

namespace fp8_dummy {
namespace cpu {

constexpr int kMtN = 624;
constexpr int kMtM = 397;
constexpr uint32_t kMtMatrixA = 0x9908b0dfu;
constexpr uint32_t kMtUpper = 0x80000000u;
constexpr uint32_t kMtLower = 0x7fffffffu;

// One word of the step: `u` gives the top bit, `v` the low 31 bits and the odd/even choice.
inline uint32_t mt_twist_word(uint32_t far, uint32_t u, uint32_t v) {
  const uint32_t y = (u & kMtUpper) | (v & kMtLower);
  return far ^ (y >> 1) ^ ((v & 1u) ? kMtMatrixA : 0u);
}

// Word i of the new block. For i < 227 the far word (i + 397) is still an old one; from 227
// on it (i - 227) was already rewritten; the last word takes its low bits from the new word 0.
inline uint32_t mt_new_word(const uint32_t* old, const uint32_t* out, int i) {
  const uint32_t far = i + kMtM < kMtN ? old[i + kMtM] : out[i + kMtM - kMtN];
  const uint32_t v = i + 1 < kMtN ? old[i + 1] : out[0];
  return mt_twist_word(far, old[i], v);
}

// The same split into ranges as the AVX2 form below, so no word pays for the index tests.
inline void mt_twist_scalar(const uint32_t* old, uint32_t* out) {
  int i = 0;
  for (; i < kMtN - kMtM; ++i) out[i] = mt_twist_word(old[i + kMtM], old[i], old[i + 1]);
  for (; i < kMtN - 1; ++i) out[i] = mt_twist_word(out[i + kMtM - kMtN], old[i], old[i + 1]);
  out[i] = mt_twist_word(out[i + kMtM - kMtN], old[i], out[0]);
}

inline uint32_t mt_temper(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

#ifdef FP8_DUMMY_X86

__attribute__((target("avx2"))) inline __m256i mt_twist8_avx2(__m256i far, __m256i u, __m256i v) {
  const __m256i y = _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(int(kMtUpper))),
                                    _mm256_and_si256(v, _mm256_set1_epi32(int(kMtLower))));
  // All-ones where v is odd, so the AND picks MATRIX_A there and 0 elsewhere.
  const __m256i odd =
      _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_and_si256(v, _mm256_set1_epi32(1)));
  const __m256i mag = _mm256_and_si256(odd, _mm256_set1_epi32(int(kMtMatrixA)));
  return _mm256_xor_si256(_mm256_xor_si256(far, _mm256_srli_epi32(y, 1)), mag);
}

__attribute__((target("avx2"))) inline __m256i load8(const uint32_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

__attribute__((target("avx2"))) inline void store8(uint32_t* p, __m256i x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x);
}

// 8 lanes at a time. 624 = 78 * 8, and the dependencies reach 227 and 397 words away, so
// no lane needs a word made in its own vector; only the two vectors whose lanes straddle a
// wrap (words 224..231, whose far words switch from old to new at 227, and 616..623, whose
// last word takes new word 0) are done word by word.
__attribute__((target("avx2"))) inline void mt_twist_avx2(const uint32_t* old, uint32_t* out) {
  int i = 0;
  for (; i + 8 <= kMtN - kMtM; i += 8) {  // far words old: 0 .. 223
    store8(out + i, mt_twist8_avx2(load8(old + i + kMtM), load8(old + i), load8(old + i + 1)));
  }
  for (; i < kMtN - kMtM + 5; ++i) out[i] = mt_new_word(old, out, i);  // 224 .. 231
  for (; i + 8 < kMtN; i += 8) {                                       // far words new: 232 .. 615
    store8(out + i,
           mt_twist8_avx2(load8(out + i + kMtM - kMtN), load8(old + i), load8(old + i + 1)));
  }
  for (; i < kMtN; ++i) out[i] = mt_new_word(old, out, i);  // 616 .. 623
}

__attribute__((target("avx2"))) inline __m256i mt_temper8_avx2(__m256i y) {
  y = _mm256_xor_si256(y, _mm256_srli_epi32(y, 11));
  y = _mm256_xor_si256(
      y, _mm256_and_si256(_mm256_slli_epi32(y, 7), _mm256_set1_epi32(int(0x9d2c5680u))));
  y = _mm256_xor_si256(
      y, _mm256_and_si256(_mm256_slli_epi32(y, 15), _mm256_set1_epi32(int(0xefc60000u))));
  return _mm256_xor_si256(y, _mm256_srli_epi32(y, 18));
}

#endif  // FP8_DUMMY_X86

}  // namespace cpu
}  // namespace fp8_dummy
