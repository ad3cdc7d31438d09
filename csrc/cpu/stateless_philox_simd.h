// Philox4x32-10 on 16 consecutive counters (key.offset + first + lane, 0) at once for the
// stateless CPU kernel: portable, AVX2, AVX-512 (GCC vectorizes the 64-bit products poorly).
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/simd.h"
#include "fp8_dummy/cuda/philox.h"

namespace fp8_dummy {
namespace stateless_simd {

constexpr int kLanes = 16;

struct Key {
  uint32_t k0, k1;
  uint64_t offset;  // added to every counter (64-bit, wrapping)
};

// Words of calls first .. first + kLanes - 1: w[word][lane].
struct Block {
  uint32_t w[4][kLanes];
};

inline void philox_portable(uint64_t first, const Key& key, Block& out) {
  uint32_t* c0 = out.w[0];
  uint32_t* c1 = out.w[1];
  uint32_t* c2 = out.w[2];
  uint32_t* c3 = out.w[3];
  for (int i = 0; i < kLanes; ++i) {
    const uint64_t c = key.offset + first + static_cast<uint64_t>(i);
    c0[i] = static_cast<uint32_t>(c);
    c1[i] = static_cast<uint32_t>(c >> 32);
    c2[i] = 0;
    c3[i] = 0;
  }
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < kLanes; ++i) {
      const uint64_t p0 = static_cast<uint64_t>(c0[i]) * cuda::kPhiloxM0;
      const uint64_t p1 = static_cast<uint64_t>(c2[i]) * cuda::kPhiloxM1;
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[i] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[i] ^ k1;
      c1[i] = static_cast<uint32_t>(p1);
      c3[i] = static_cast<uint32_t>(p0);
      c0[i] = n0;
      c2[i] = n2;
    }
    k0 += cuda::kPhiloxW0;
    k1 += cuda::kPhiloxW1;
  }
}

#ifdef FP8_DUMMY_X86

#define FP8_DUMMY_AVX512 __attribute__((target("avx512f")))
#define FP8_DUMMY_AVX2 __attribute__((target("avx2")))

// ---- AVX-512.

// One call per 64-bit lane: vpmuludq gives a lane's whole product (a quarter fewer operations
// than 32-bit lanes; the upper halves carry garbage nothing reads).
template <int kN>
FP8_DUMMY_AVX512 inline void philox8x64(uint64_t first, const Key& key, __m512i c[4][kN]) {
  const __m512i iota = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  for (int n = 0; n < kN; ++n) {
    const uint64_t base = key.offset + first + 8 * static_cast<uint64_t>(n);
    const __m512i counter = _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(base)), iota);
    c[0][n] = counter;
    c[1][n] = _mm512_srli_epi64(counter, 32);
    c[2][n] = _mm512_setzero_si512();
    c[3][n] = _mm512_setzero_si512();
  }
  const __m512i m0 = _mm512_set1_epi64(cuda::kPhiloxM0);
  const __m512i m1 = _mm512_set1_epi64(cuda::kPhiloxM1);
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi64(k0);
    const __m512i key1 = _mm512_set1_epi64(k1);
    for (int n = 0; n < kN; ++n) {
      const __m512i p0 = _mm512_mul_epu32(c[0][n], m0);
      const __m512i p1 = _mm512_mul_epu32(c[2][n], m1);
      c[0][n] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c[1][n], key0, 0x96);
      c[1][n] = p1;
      c[2][n] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c[3][n], key1, 0x96);
      c[3][n] = p0;
    }
    k0 += cuda::kPhiloxW0;
    k1 += cuda::kPhiloxW1;
  }
}

// 16 consecutive calls as Block's words (vpmovqd keeps each lane's low half).
FP8_DUMMY_AVX512 inline void philox_avx512(uint64_t first, const Key& key, Block& out) {
  __m512i c[4][2];
  philox8x64<2>(first, key, c);
  for (int k = 0; k < 4; ++k) {
    for (int n = 0; n < 2; ++n) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[k] + 8 * n),
                          _mm512_cvtepi64_epi32(c[k][n]));
    }
  }
}

// Calls per fp8_avx512 call (128 bytes): four interleaved registers measured fastest.
constexpr int kFp8Calls512 = 32;

// Byte 4 * call + k of calls first, first + 1, ... is table[word k & 0x7ff] (a uint32 each).
FP8_DUMMY_AVX512 inline void fp8_avx512(uint64_t first, const Key& key, const uint32_t* table,
                                        uint8_t* dst) {
  constexpr int kN = kFp8Calls512 / 8;
  __m512i c[4][kN];
  philox8x64<kN>(first, key, c);
  const __m512i mask = _mm512_set1_epi64(0x7ff);
  for (int n = 0; n < kN; ++n) {
    __m256i v = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const __m256i g = _mm512_i64gather_epi32(_mm512_and_si512(c[k][n], mask), table, 4);
      v = _mm256_or_si256(v, _mm256_slli_epi32(g, 8 * k));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * n), v);
  }
}

// AVX-512 VBMI (Ice Lake, Zen 4 and later): the 2048-byte table as 16 two-register byte
// permutes (vpermt2b: 128 entries by an index's low 7 bits), merged by the index's 4 high
// bits; cheaper than the gathers, which cost as much as the Philox rounds.
#define FP8_DUMMY_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

inline bool cpu_has_vbmi() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
  }();
  return has;
}

// The 2048-byte table as 32 registers of 64 bytes (loaded once per fill).
struct Table64 {
  alignas(64) uint8_t bytes[2048];
};

#define FP8_DUMMY_AVX512BW __attribute__((target("avx512f,avx512bw")))

inline bool cpu_has_avx512bw() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }();
  return has;
}

// Each call's four words' low 16 bits in one 64-bit lane (word k at bit 16 k): element
// 4 * call + k of a group of 8 calls in 16-bit lane 4 * call + k, the order it is stored in.
FP8_DUMMY_AVX512BW inline __m512i pack_words16(const __m512i c[4]) {
  __m512i q = c[0];
  q = _mm512_mask_blend_epi16(0x22222222u, q, _mm512_slli_epi64(c[1], 16));
  q = _mm512_mask_blend_epi16(0x44444444u, q, _mm512_slli_epi64(c[2], 32));
  return _mm512_mask_blend_epi16(0x88888888u, q, _mm512_slli_epi64(c[3], 48));
}

// 64 bytes of 16 consecutive calls (groups a then b of 8, one call per 64-bit lane): byte
// 4 * call + k is table[word k & 0x7ff].
FP8_DUMMY_VBMI inline __m512i fp8_lookup16(const __m512i a[4], const __m512i b[4],
                                           const Table64& table) {
  // Bytes 0-3 of a lane: word k's bits 0-7 (the permutes read the low 7); bytes 4-7: its
  // bits 7-14 (the low 4 pick one of the 16 permutes).
  const __m512i fields = _mm512_set1_epi64(0x3727170730201000LL);
  const __m512i qa = _mm512_multishift_epi64_epi8(fields, pack_words16(a));
  const __m512i qb = _mm512_multishift_epi64_epi8(fields, pack_words16(b));
  alignas(64) static constexpr auto order = [] {
    struct {
      uint8_t low[64], high[64];
    } o{};
    for (int call = 0; call < 16; ++call) {
      for (int k = 0; k < 4; ++k) {  // call < 8 from qa's lane, else qb's (index bit 6)
        const int at = (call < 8 ? 8 * call : 64 + 8 * (call - 8)) + k;
        o.low[4 * call + k] = static_cast<uint8_t>(at);
        o.high[4 * call + k] = static_cast<uint8_t>(at + 4);
      }
    }
    return o;
  }();
  const __m512i index = _mm512_permutex2var_epi8(qa, _mm512_load_si512(order.low), qb);
  const __m512i high = _mm512_permutex2var_epi8(qa, _mm512_load_si512(order.high), qb);
  __m512i part[16];
  for (int j = 0; j < 16; ++j) {
    const __m512i lo = _mm512_load_si512(table.bytes + 128 * j);
    const __m512i hi = _mm512_load_si512(table.bytes + 128 * j + 64);
    part[j] = _mm512_permutex2var_epi8(lo, index, hi);
  }
  for (int bit = 0, width = 16; width > 1; ++bit, width /= 2) {  // a tree over the 4 bits
    const __mmask64 odd =
        _mm512_test_epi8_mask(high, _mm512_set1_epi8(static_cast<char>(1 << bit)));
    for (int j = 0; j < width / 2; ++j) {
      part[j] = _mm512_mask_blend_epi8(odd, part[2 * j], part[2 * j + 1]);
    }
  }
  return part[0];
}

// 4 * kFp8Calls512 FP8 bytes as fp8_avx512 writes them, via the permutes.
FP8_DUMMY_VBMI inline void fp8_vbmi(uint64_t first, const Key& key, const Table64& table,
                                    uint8_t* dst) {
  constexpr int kN = kFp8Calls512 / 8;
  static_assert(kN % 2 == 0, "groups are taken in pairs: 16 consecutive calls");
  __m512i c[4][kN];
  philox8x64<kN>(first, key, c);
  for (int n = 0; n < kN; n += 2) {
    const __m512i a[4] = {c[0][n], c[1][n], c[2][n], c[3][n]};
    const __m512i b[4] = {c[0][n + 1], c[1][n + 1], c[2][n + 1], c[3][n + 1]};
    _mm512_storeu_si512(dst + 32 * n, fp8_lookup16(a, b, table));
  }
}

#undef FP8_DUMMY_VBMI

// 4 * kFp8Calls512 bfloat16 elements (element 4 * call + k is table[word k & 0xff]; the
// 256-entry table 64-byte aligned, read as 8 registers of 32 words): per group of 8 calls,
// four two-register word permutes (vpermt2w: 64 entries by an index's low 6 bits) merged by
// its bits 6 and 7, one 64-byte store; where the scalar lookup took a load and a 2-byte
// store per element.
FP8_DUMMY_AVX512BW inline void bf16_avx512bw(uint64_t first, const Key& key, const uint16_t* table,
                                             uint16_t* dst) {
  constexpr int kN = kFp8Calls512 / 8;
  __m512i c[4][kN];
  philox8x64<kN>(first, key, c);
  __m512i t[8];
  for (int i = 0; i < 8; ++i) t[i] = _mm512_load_si512(table + 32 * i);
  const __m512i bit6 = _mm512_set1_epi16(64);
  const __m512i bit7 = _mm512_set1_epi16(128);
  for (int n = 0; n < kN; ++n) {
    const __m512i words[4] = {c[0][n], c[1][n], c[2][n], c[3][n]};
    const __m512i index = pack_words16(words);  // the permutes and tests read bits 0-7 only
    const __mmask32 b6 = _mm512_test_epi16_mask(index, bit6);
    const __m512i low = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[0], index, t[1]),
                                                _mm512_permutex2var_epi16(t[2], index, t[3]));
    const __m512i high = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[4], index, t[5]),
                                                 _mm512_permutex2var_epi16(t[6], index, t[7]));
    _mm512_storeu_si512(dst + 32 * n,
                        _mm512_mask_blend_epi16(_mm512_test_epi16_mask(index, bit7), low, high));
  }
}

#undef FP8_DUMMY_AVX512BW

// Byte 4 * call + k of calls first, first + 1, ... is low + (word k & mask) mod 256: the
// integer bytes of a power-of-two range (ByteOut<true>), 4 * kFp8Calls512 at a time. Only a
// word's low byte reaches the result, so the words' low bytes are packed and masked in place.
FP8_DUMMY_AVX512 inline void bytes_avx512(uint64_t first, const Key& key, uint8_t mask, uint8_t low,
                                          uint8_t* dst) {
  constexpr int kN = kFp8Calls512 / 8;
  __m512i c[4][kN];
  philox8x64<kN>(first, key, c);
  const __m512i byte = _mm512_set1_epi64(0xff);
  const __m256i masks = _mm256_set1_epi8(static_cast<char>(mask));
  const __m256i lows = _mm256_set1_epi8(static_cast<char>(low));
  for (int n = 0; n < kN; ++n) {
    __m512i v = _mm512_and_si512(c[0][n], byte);  // call's word k at byte k of its lane
    for (int k = 1; k < 4; ++k) {
      v = _mm512_or_si512(v, _mm512_slli_epi64(_mm512_and_si512(c[k][n], byte), 8 * k));
    }
    const __m256i b = _mm256_and_si256(_mm512_cvtepi64_epi32(v), masks);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * n), _mm256_add_epi8(b, lows));
  }
}

// Few distinct bytes along the 2048 values (+-1e-3: four runs in e4m3fn): counting the run
// starts passed, then one permute, beats the gathers.
constexpr int kMaxRuns = 8;
struct Runs {
  int count;                  // runs; starts[0] == 0 is implicit
  uint32_t starts[kMaxRuns];  // starts[1 .. count - 1]: index where a run begins
  uint32_t bytes[16];         // bytes[r]: the byte of run r (16 for the permute)
};

inline bool make_runs(const uint8_t* table, Runs* runs) {
  runs->count = 1;
  std::memset(runs->bytes, 0, sizeof(runs->bytes));
  runs->bytes[0] = table[0];
  for (uint32_t b = 1; b < 2048; ++b) {
    if (table[b] == table[b - 1]) continue;
    if (runs->count == kMaxRuns) return false;
    runs->starts[runs->count] = b;
    runs->bytes[runs->count++] = table[b];
  }
  return true;
}

// 4 * kFp8Calls512 FP8 bytes as fp8_avx512 writes them, via the runs.
FP8_DUMMY_AVX512 inline void fp8_runs_avx512(uint64_t first, const Key& key, const Runs& runs,
                                             uint8_t* dst) {
  constexpr int kN = kFp8Calls512 / 8;
  static_assert(kN % 2 == 0, "groups are taken in pairs: 16 consecutive calls");
  __m512i c[4][kN];
  philox8x64<kN>(first, key, c);
  const __m512i mask = _mm512_set1_epi32(0x7ff);
  const __m512i bytes = _mm512_loadu_si512(runs.bytes);
  const __m512i one = _mm512_set1_epi32(1);
  for (int n = 0; n < kN; n += 2) {
    __m512i v = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      // Word k of 16 consecutive calls, as 32-bit lanes (calls of group n first).
      const __m512i words =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(c[k][n])),
                             _mm512_cvtepi64_epi32(c[k][n + 1]), 1);
      const __m512i index = _mm512_and_si512(words, mask);
      __m512i run = _mm512_setzero_si512();
      for (int r = 1; r < runs.count; ++r) {
        const __mmask16 past = _mm512_cmpge_epu32_mask(index, _mm512_set1_epi32(runs.starts[r]));
        run = _mm512_mask_add_epi32(run, past, run, one);
      }
      v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_permutexvar_epi32(run, bytes), 8 * k));
    }
    _mm512_storeu_si512(dst + 32 * n, v);
  }
}

// ---- AVX2: two registers of 8 lanes per counter word.

FP8_DUMMY_AVX2 inline void mulhilo8(__m256i a, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

FP8_DUMMY_AVX2 inline void philox8(uint64_t base, const Key& key, __m256i c[4]) {
  const __m256i lo_base = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(base)));
  c[0] = _mm256_add_epi32(lo_base, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  // Unsigned c0 < lo_base (a wrap of the low word) via signed compare of biased values.
  const __m256i bias = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i carry =
      _mm256_cmpgt_epi32(_mm256_xor_si256(lo_base, bias), _mm256_xor_si256(c[0], bias));
  const __m256i hi_base = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32)));
  c[1] = _mm256_sub_epi32(hi_base, carry);  // carry lanes are -1
  c[2] = _mm256_setzero_si256();
  c[3] = _mm256_setzero_si256();
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(cuda::kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(cuda::kPhiloxM1));
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    mulhilo8(c[0], m0, &hi0, &lo0);
    mulhilo8(c[2], m1, &hi1, &lo1);
    c[0] = _mm256_xor_si256(_mm256_xor_si256(hi1, c[1]), _mm256_set1_epi32(static_cast<int>(k0)));
    c[1] = lo1;
    c[2] = _mm256_xor_si256(_mm256_xor_si256(hi0, c[3]), _mm256_set1_epi32(static_cast<int>(k1)));
    c[3] = lo0;
    k0 += cuda::kPhiloxW0;
    k1 += cuda::kPhiloxW1;
  }
}

FP8_DUMMY_AVX2 inline void philox_avx2(uint64_t first, const Key& key, Block& out) {
  for (int half = 0; half < 2; ++half) {
    __m256i c[4];
    philox8(key.offset + first + 8 * half, key, c);
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[k] + 8 * half), c[k]);
    }
  }
}

constexpr int kFp8Calls256 = 16;

FP8_DUMMY_AVX2 inline void fp8_avx2(uint64_t first, const Key& key, const uint32_t* table,
                                    uint8_t* dst) {
  const __m256i mask = _mm256_set1_epi32(0x7ff);
  for (int half = 0; half < 2; ++half) {
    __m256i c[4];
    philox8(key.offset + first + 8 * half, key, c);
    __m256i v = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const __m256i g = _mm256_i32gather_epi32(reinterpret_cast<const int*>(table),
                                               _mm256_and_si256(c[k], mask), 4);
      v = _mm256_or_si256(v, _mm256_slli_epi32(g, 8 * k));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * half), v);
  }
}

#undef FP8_DUMMY_AVX512
#undef FP8_DUMMY_AVX2

#endif  // FP8_DUMMY_X86

}  // namespace stateless_simd
}  // namespace fp8_dummy
