// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11): the counter-based generator behind torch's CUDA random kernels (through
// cuRAND's curandStatePhilox4_32_10_t). Torch-free, host and device.
#pragma once

#include <cstdint>

#include "fp8_dummy/cuda/config.h"

namespace fp8_dummy {
namespace cuda {

// Four 32-bit words: a counter going in, random words coming out.
struct Words4 {
  uint32_t w[4];
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // key bumps: golden ratio, sqrt(3) - 1
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

// The high and low halves of the 64-bit product a * b: one wide multiply (IMAD.WIDE.U32 on
// the device, where __umulhi and a * b issue two instructions; the same bits).
FP8_DUMMY_HD void mul_hi_lo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

// One round: two multiplications, the halves crossed over and mixed with the key.
FP8_DUMMY_HD Words4 philox_round(Words4 c, uint32_t k0, uint32_t k1) {
  uint32_t hi0, lo0, hi1, lo1;
  mul_hi_lo(kPhiloxM0, c.w[0], &hi0, &lo0);
  mul_hi_lo(kPhiloxM1, c.w[2], &hi1, &lo1);
  return Words4{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
}

// The ten round keys of key (k0, k1), bumped between rounds: computed once where many calls
// share the key (a kernel's seed), so that no call recomputes them.
struct PhiloxKeys {
  uint32_t k0[10], k1[10];
};

FP8_DUMMY_HD PhiloxKeys philox_keys(uint32_t k0, uint32_t k1) {
  PhiloxKeys keys;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    keys.k0[round] = k0;
    keys.k1[round] = k1;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return keys;
}

// The round keys of a 64-bit seed (key words: its low and high halves).
FP8_DUMMY_HD PhiloxKeys philox_keys(uint64_t seed) {
  return philox_keys(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Philox4x32-10 of `counter` under the round keys `keys`.
FP8_DUMMY_HD Words4 philox4x32_10(Words4 counter, const PhiloxKeys& keys) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round)
    counter = philox_round(counter, keys.k0[round], keys.k1[round]);
  return counter;
}

// Philox4x32-10 of `counter` under key (k0, k1): 10 rounds, the key bumped between them.
FP8_DUMMY_HD Words4 philox4x32_10(Words4 counter, uint32_t k0, uint32_t k1) {
  return philox4x32_10(counter, philox_keys(k0, k1));
}

// The words cuRAND's Philox state returns after curand_init(seed, subsequence,
// skip) with skip a multiple of 4, `step` calls of curand4 later: the counter is
// (skip / 4 + step) in words 0-1 and the subsequence in words 2-3, the key the seed
// (`keys`: philox_keys of its two halves).
FP8_DUMMY_HD Words4 philox_words(const PhiloxKeys& keys, uint64_t subsequence, uint64_t skip,
                                 uint64_t step) {
  const uint64_t position = skip / 4 + step;
  const Words4 counter{{static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32),
                        static_cast<uint32_t>(subsequence),
                        static_cast<uint32_t>(subsequence >> 32)}};
  return philox4x32_10(counter, keys);
}

// philox_words of the N consecutive subsequences first .. first + N - 1 (below 2^32: their
// high words are 0) at one position: out[q] for subsequence first + q. The first round's
// products are shared: position's once for all N, and subsequence first + q's as
// M1 * first + M1 * q, a 64-bit add of a constant (exact: the product is below 2^64) instead
// of a multiply per call. Then rounds 2 to 10 per call.
template <int N>
FP8_DUMMY_HD void philox_words_run(const PhiloxKeys& keys, uint32_t first, uint64_t skip,
                                   uint64_t step, Words4 (&out)[N]) {
  const uint64_t position = skip / 4 + step;
  const auto pos_lo = static_cast<uint32_t>(position);
  const auto pos_hi = static_cast<uint32_t>(position >> 32);
  uint32_t hi0, lo0;
  mul_hi_lo(kPhiloxM0, pos_lo, &hi0, &lo0);
  const uint64_t first_product = static_cast<uint64_t>(kPhiloxM1) * first;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int q = 0; q < N; ++q) {
    const uint64_t product = first_product + static_cast<uint64_t>(kPhiloxM1) * q;
    Words4 c{{static_cast<uint32_t>(product >> 32) ^ pos_hi ^ keys.k0[0],
              static_cast<uint32_t>(product), hi0 ^ keys.k1[0], lo0}};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int round = 1; round < 10; ++round) c = philox_round(c, keys.k0[round], keys.k1[round]);
    out[q] = c;
  }
}

FP8_DUMMY_HD Words4 philox_words(uint64_t seed, uint64_t subsequence, uint64_t skip,
                                 uint64_t step) {
  return philox_words(philox_keys(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)),
                      subsequence, skip, step);
}

}  // namespace cuda
}  // namespace fp8_dummy
