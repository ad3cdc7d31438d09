// FP8 bytes straight from the random bits, for bounds where few FP8 values occur (vLLM's
// default +-1e-3 gives 5 runs in float8_e4m3fn): the byte is a step function of
// x = word & mask, so it is `first` plus the deltas of the breakpoints x has passed. Per
// element that is a few compares instead of the float16 transform and the FP8 conversion.
//
// Why a step function: x -> v = x * 2^-bits * range + low (fused or not) -> half(v) is
// non-decreasing (every rounding is monotone, range >= 0), taking -0 before +0; so each
// half value's preimage is an interval of x, and so is each FP8 value's (float16 -> FP8
// is monotone too within the format's finite range, where this is used). The clamp
// (half(high) -> half(low)) replaces one such interval. So the runs are found by binary
// search with the scalar transform and the table made by torch's copy_ (the definition),
// and then checked on spread samples and on both sides of every breakpoint.
#pragma once

#include <cstdint>

#include "cpu/uniform_transform.h"

namespace fp8_dummy {
namespace cpu {

constexpr int kMaxBreaks = 15;

struct Fp8Runs {
  int breaks = 0;                // runs - 1
  uint8_t first = 0;             // the byte of run 0 (x from 0)
  uint32_t start[kMaxBreaks]{};  // where run i + 1 starts, increasing
  int32_t delta[kMaxBreaks]{};   // its byte minus the previous run's (so sums stay bytes)
};

inline uint8_t run_byte(uint32_t x, const Fp8Runs& r) {
  int32_t b = r.first;
  for (int i = 0; i < r.breaks; ++i) b += x >= r.start[i] ? r.delta[i] : 0;
  return static_cast<uint8_t>(b);
}

namespace detail {

// Sorts halves by value, -0 just before +0.
inline uint32_t half_order(uint16_t h) {
  return (h & 0x8000) ? 0x7FFFu - (h & 0x7FFF) : 0x8000u + h;
}

// The last x in [lo, hi] with pred(x) true, given pred(lo) true and pred monotone (true
// then false).
template <class Pred>
uint32_t last_true(uint32_t lo, uint32_t hi, const Pred& pred) {
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (pred(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace detail

// The runs of x -> table[transform(x)] for `p`, or false if there are more than kMaxBreaks
// or a check fails. The caller makes sure the bounds are within the format's finite range.
inline bool make_fp8_runs(const UniformParams& p, const uint8_t* table, Fp8Runs* out) {
  const uint32_t top = p.mask;  // x in [0, top]
  auto raw = [&](uint32_t x) {  // half(v) before the clamp
    UniformParams q = p;
    q.clamp = false;
    return transform_scalar(x, q);
  };
  auto byte = [&](uint32_t x) { return table[transform_scalar(x, p)]; };
  // Segments: before the clamp interval, the interval (one half value: half(low)), after.
  uint32_t seg[3][2];
  int segs = 0;
  auto clamped = [&](uint32_t x) { return p.clamp && half_equal(raw(x), p.to_bits); };
  const uint32_t to_order = detail::half_order(p.to_bits);
  const uint32_t to_lo = (p.to_bits & 0x7FFF) == 0 ? 0x7FFFu : to_order;  // +-0 both equal
  const uint32_t to_hi = (p.to_bits & 0x7FFF) == 0 ? 0x8000u : to_order;
  auto below = [&](uint32_t x) { return detail::half_order(raw(x)) < to_lo; };
  uint32_t x = 0;
  if (p.clamp && !below(top)) {
    if (below(0)) {
      const uint32_t e = detail::last_true(0, top, below);
      seg[segs][0] = 0, seg[segs][1] = e, ++segs;
      x = e + 1;
    }
    if (clamped(x)) {
      auto in = [&](uint32_t y) { return detail::half_order(raw(y)) <= to_hi; };
      const uint32_t e = detail::last_true(x, top, in);
      seg[segs][0] = x, seg[segs][1] = e, ++segs;
      x = e + 1;
    }
    if (x <= top) seg[segs][0] = x, seg[segs][1] = top, ++segs;
  } else {
    seg[segs][0] = 0, seg[segs][1] = top, ++segs;
  }
  Fp8Runs r;
  r.first = byte(0);
  uint8_t prev = r.first;
  for (int s = 0; s < segs; ++s) {
    for (uint32_t a = seg[s][0];;) {
      const uint8_t c = byte(a);
      if (a != 0 && c != prev) {
        if (r.breaks == kMaxBreaks) return false;
        r.start[r.breaks] = a;
        r.delta[r.breaks] = int32_t{c} - int32_t{prev};
        ++r.breaks;
        prev = c;
      }
      const uint32_t e = detail::last_true(a, seg[s][1], [&](uint32_t y) { return byte(y) == c; });
      if (e == seg[s][1]) break;
      a = e + 1;
    }
  }
  // The checks: both sides of every breakpoint, the ends, and 4096 spread points.
  for (int i = 0; i < r.breaks; ++i) {
    if (run_byte(r.start[i], r) != byte(r.start[i]) ||
        run_byte(r.start[i] - 1, r) != byte(r.start[i] - 1)) {
      return false;
    }
  }
  for (uint32_t k = 0; k <= 4096; ++k) {
    const uint32_t y = static_cast<uint32_t>((uint64_t{top} * k) / 4096);
    if (run_byte(y, r) != byte(y)) return false;
  }
  *out = r;
  return true;
}

inline void runs_block_scalar(const uint32_t* words, int64_t n, uint32_t mask, const Fp8Runs& r,
                              uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = run_byte(mt_temper(words[i]) & mask, r);
}

#ifdef FP8_DUMMY_X86

// The bytes of 8 elements, each in its own dword.
template <int K>
__attribute__((target("avx2"))) inline __m256i runs8_avx2(__m256i x, const __m256i* start,
                                                          const __m256i* delta, __m256i first) {
  __m256i a = first;
  for (int k = 0; k < K; ++k) {  // x < 2^24: the signed compare is exact
    a = _mm256_add_epi32(a, _mm256_and_si256(_mm256_cmpgt_epi32(x, start[k]), delta[k]));
  }
  return a;
}

// 32 elements per turn: 4 vectors of bytes-in-dwords, packed (the sums are the bytes
// themselves, so unsigned saturation never bites) and put back in order; then 8 at a time,
// the last few through a padded vector (a block of 624 has 16 left after the 32s). K, the
// number of breakpoints, is a template argument so the loops unroll and the sums stay in
// registers (with a run-time count they were spilled to the stack).
template <int K>
__attribute__((target("avx2"))) inline void runs_block_avx2_k(const uint32_t* words, int64_t n,
                                                              uint32_t mask, const Fp8Runs& r,
                                                              uint8_t* out) {
  const __m256i m = _mm256_set1_epi32(static_cast<int>(mask));
  __m256i start[K > 0 ? K : 1], delta[K > 0 ? K : 1];
  for (int i = 0; i < K; ++i) {
    start[i] = _mm256_set1_epi32(static_cast<int>(r.start[i]) - 1);  // x > start - 1
    delta[i] = _mm256_set1_epi32(r.delta[i]);
  }
  const __m256i first = _mm256_set1_epi32(r.first);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i* w = reinterpret_cast<const __m256i*>(words + i);
    const __m256i a0 = runs8_avx2<K>(_mm256_and_si256(mt_temper8_avx2(_mm256_loadu_si256(w)), m),
                                     start, delta, first);
    const __m256i a1 = runs8_avx2<K>(
        _mm256_and_si256(mt_temper8_avx2(_mm256_loadu_si256(w + 1)), m), start, delta, first);
    const __m256i a2 = runs8_avx2<K>(
        _mm256_and_si256(mt_temper8_avx2(_mm256_loadu_si256(w + 2)), m), start, delta, first);
    const __m256i a3 = runs8_avx2<K>(
        _mm256_and_si256(mt_temper8_avx2(_mm256_loadu_si256(w + 3)), m), start, delta, first);
    const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(a0, a1), _mm256_packus_epi32(a2, a3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permutevar8x32_epi32(b, order));
  }
  alignas(32) uint32_t tail[8] = {};
  for (; i < n; i += 8) {
    const int64_t len = n - i < 8 ? n - i : 8;
    const uint32_t* w = words + i;
    if (len < 8) {
      for (int64_t j = 0; j < len; ++j) tail[j] = words[i + j];
      w = tail;
    }
    const __m256i a =
        runs8_avx2<K>(_mm256_and_si256(mt_temper8_avx2(load8(w)), m), start, delta, first);
    const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(a, a), _mm256_setzero_si256());
    alignas(16) uint8_t bytes[16];
    // Lane 0 holds bytes 0-3 in its first dword, lane 1 bytes 4-7 in its first (dword 4).
    _mm_store_si128(reinterpret_cast<__m128i*>(bytes),
                    _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(p, order)));
    for (int64_t j = 0; j < len; ++j) out[i + j] = bytes[j];
  }
}

template <int K>
inline void runs_dispatch_avx2(const uint32_t* words, int64_t n, uint32_t mask, const Fp8Runs& r,
                               uint8_t* out) {
  if constexpr (K < kMaxBreaks) {
    if (r.breaks > K) return runs_dispatch_avx2<K + 1>(words, n, mask, r, out);
  }
  runs_block_avx2_k<K>(words, n, mask, r, out);
}

inline void runs_block_avx2(const uint32_t* words, int64_t n, uint32_t mask, const Fp8Runs& r,
                            uint8_t* out) {
  runs_dispatch_avx2<0>(words, n, mask, r, out);
}

#endif  // FP8_DUMMY_X86

}  // namespace cpu
}  // namespace fp8_dummy
