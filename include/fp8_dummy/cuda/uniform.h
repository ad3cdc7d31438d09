// torch's CUDA uniform_ on a float16 tensor (docs/contract.md R3): which Philox word fills
// which element, how it becomes a float16 value, what each launch reserves. Torch-free, host
// and device (reference_launches: host only).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "fp8_dummy/cuda/config.h"
#include "fp8_dummy/cuda/philox.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace fp8_dummy {
namespace cuda {

FP8_DUMMY_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

FP8_DUMMY_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Exact (every float16 value is a float).
FP8_DUMMY_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
#endif
}

// Round to nearest, ties to even, as __float2half_rn and c10::Half(float) do.
FP8_DUMMY_HD uint16_t float_to_half_rn(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;   // NaN: the quiet NaN torch makes
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (incl. inf) rounds to inf
  uint32_t kept, rest, half_way;
  if (x < 0x38800000u) {  // below 2^-14: a float16 subnormal, quantum 2^-24
    const uint32_t exp = x >> 23;
    if (exp < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t mant = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 ... 24
    kept = mant >> shift;
    rest = mant & ((1u << shift) - 1);
    half_way = 1u << (shift - 1);
  } else {  // normal: drop 13 mantissa bits, rebias the exponent (127 -> 15)
    kept = (x - (112u << 23)) >> 13;
    rest = x & 0x1fffu;
    half_way = 0x1000u;
  }
  // A carry out of the mantissa correctly bumps the exponent.
  if (rest > half_way || (rest == half_way && (kept & 1u))) ++kept;
  return static_cast<uint16_t>(sign | kept);
#endif
}

// curand_uniform: u = float(x) * 2^-32 + 2^-33, in (0, 1]. The int -> float
// conversion rounds; the product is exact, so one more rounding at the add, whether
// or not the compiler fuses it.
FP8_DUMMY_HD float word_to_unit(uint32_t x) {
  return static_cast<float>(x) * 2.3283064365386963e-10f + 1.1641532182693481e-10f;
}

// What uniform_kernel computes once per call from (from_, to_): the bounds as
// float16 (double -> float -> half, as static_cast<c10::Half>(double) does) and
// range = float(half(float(to) - float(from))) (c10::Half subtraction).
struct UniformParams {
  float from;  // float(from_h)
  float range;
  uint16_t from_h;
  uint16_t to_h;
};

FP8_DUMMY_HD UniformParams make_uniform_params(double low, double high) {
  UniformParams p;
  p.from_h = float_to_half_rn(static_cast<float>(low));
  p.to_h = float_to_half_rn(static_cast<float>(high));
  p.from = half_to_float(p.from_h);
  p.range = half_to_float(float_to_half_rn(half_to_float(p.to_h) - p.from));
  return p;
}

// One element: half(fma(u, range, from)) (nvcc contracts `rand * range + from` into
// one FMA, and a separate multiply and add would round twice), then the reverse
// bound rule: a value equal to `to` (compared as floats, so -0 == +0) becomes `from`.
FP8_DUMMY_HD uint16_t uniform_half(uint32_t word, const UniformParams& p) {
  const float u = word_to_unit(word);
#if defined(__CUDA_ARCH__)
  const uint16_t v = float_to_half_rn(__fmaf_rn(u, p.range, p.from));
#else
  const uint16_t v = float_to_half_rn(std::fmaf(u, p.range, p.from));
#endif
  const bool equal = v == p.to_h || ((v | p.to_h) & 0x7fffu) == 0;
  return equal ? p.from_h : v;
}

// Two elements, low half first; on the device one packed conversion and one packed
// comparison (IEEE equality of the halves is the reference's, -0 == +0 included).
FP8_DUMMY_HD uint32_t uniform_half2(uint32_t word_lo, uint32_t word_hi, const UniformParams& p) {
#if defined(__CUDA_ARCH__)
  const float lo = __fmaf_rn(word_to_unit(word_lo), p.range, p.from);
  const float hi = __fmaf_rn(word_to_unit(word_hi), p.range, p.from);
  const __half2 pair = __floats2half2_rn(lo, hi);
  const __half to = __ushort_as_half(p.to_h);
  const uint32_t equal = __heq2_mask(pair, __halves2half2(to, to));  // 0xffff per equal lane
  // The pair's 32 bits as they are (low half first): taking the halves apart and joining them
  // again cost sm_100 code about three byte permutes per pair.
  uint32_t v;
  memcpy(&v, &pair, sizeof(v));
  return (v & ~equal) | ((p.from_h * 0x10001u) & equal);
#else
  return uniform_half(word_lo, p) | (static_cast<uint32_t>(uniform_half(word_hi, p)) << 16);
#endif
}

constexpr int64_t kBlockThreads = 256;  // uniform_'s block size
constexpr int64_t kWordsPerCall = 4;    // curand_uniform4: one Philox call per grid step

// The launch of one uniform_ kernel over n float16 elements on a GPU with `sm_count`
// SMs and `max_threads_per_sm` threads per SM: thread idx in [0, threads), step k,
// word ii fills element idx + threads * (4k + ii); counter_offset is what the launch
// reserves (and advances the generator by).
struct ReferenceGrid {
  int64_t blocks;
  int64_t threads;
  int64_t steps;            // grid-stride steps: Philox calls per thread
  uint64_t counter_offset;  // 4 * steps
};

FP8_DUMMY_HD ReferenceGrid reference_grid(int64_t n, int64_t sm_count, int64_t max_threads_per_sm) {
  ReferenceGrid g;
  const int64_t wanted = (n + kBlockThreads - 1) / kBlockThreads;
  const int64_t most = sm_count * (max_threads_per_sm / kBlockThreads);
  g.blocks = wanted < most ? wanted : most;
  g.threads = g.blocks * kBlockThreads;
  g.steps = (n - 1) / (g.threads * kWordsPerCall) + 1;
  g.counter_offset = static_cast<uint64_t>(g.steps * kWordsPerCall);
  return g;
}

// The element a word fills, counted from the start of its launch's piece.
FP8_DUMMY_HD int64_t element_of(int64_t idx, int64_t step, int word, int64_t threads) {
  return idx + threads * (step * kWordsPerCall + word);
}

// TensorIterator runs one kernel over n float16 elements only when every byte
// offset fits in int32: 2 * (n - 1) + 1 <= INT32_MAX, i.e. n <= 2^30.
constexpr int64_t kMax32BitHalfElements = int64_t{1} << 30;

// The Philox offsets a fresh generator (manual_seed(seed): offset 0) hands out to successive
// reservations: the seed form of init_ creates no generator (also legal in CUDA graph
// capture, where constructing one is not); the batched kernel gives each tensor one.
struct FreshOffsets {
  uint64_t next = 0;
  FP8_DUMMY_HD uint64_t operator()(uint64_t increment) {
    const uint64_t at = next;
    next += increment;
    return at;
  }
};

template <typename Launch>
void for_each_32bit_piece(int64_t start, int64_t n, Launch& launch) {
  if (n <= kMax32BitHalfElements) {
    launch(start, n);
    return;
  }
  // TensorIterator::split: the first half (floor) first, depth first.
  const int64_t first = n / 2;
  for_each_32bit_piece(start, first, launch);
  for_each_32bit_piece(start + first, n - first, launch);
}

// The launches of uniform_ over n > 0 float16 elements, as distribution_nullary_kernel makes
// them: it reserves counter_offset for the whole n; when n needs splitting it leaves that
// unused and runs each 32-bit piece with its own grid and reservation. `reserve(increment)`
// returns what a launch needs (e.g. a PhiloxCudaState); `launch(start, count, grid, reserved)`.
template <typename Reserve, typename Launch>
void reference_launches(int64_t n, int64_t sm_count, int64_t max_threads_per_sm, Reserve&& reserve,
                        Launch&& launch) {
  const ReferenceGrid whole = reference_grid(n, sm_count, max_threads_per_sm);
  auto reserved = reserve(whole.counter_offset);
  if (n <= kMax32BitHalfElements) {
    launch(int64_t{0}, n, whole, reserved);
    return;
  }
  auto piece = [&](int64_t start, int64_t count) {
    const ReferenceGrid grid = reference_grid(count, sm_count, max_threads_per_sm);
    launch(start, count, grid, reserve(grid.counter_offset));
  };
  for_each_32bit_piece(0, n, piece);
}

}  // namespace cuda
}  // namespace fp8_dummy
