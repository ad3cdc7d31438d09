// 1-byte outputs without copy_'s float16 -> byte table where that gives its bytes: runs (the
// byte as a step function of the random bits, found by binary search, then checked) and
// direct float16 -> FP8 in registers within the finite range (checked on every half first).
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <mutex>

#include "cpu/transforms.h"

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

// The last x in [lo, hi] with pred(x), pred(lo) true and pred monotone (true, then false).
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

// The runs of x -> table[transform(x)], or false past kMaxBreaks or on a failed check.
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
  // Both sides of every breakpoint, the ends, and 4096 spread points.
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

template <int K>
__attribute__((target("avx2"))) inline __m256i runs8_avx2(__m256i x, const __m256i* start,
                                                          const __m256i* delta, __m256i first) {
  __m256i a = first;
  for (int k = 0; k < K; ++k) {  // x < 2^24: the signed compare is exact
    a = _mm256_add_epi32(a, _mm256_and_si256(_mm256_cmpgt_epi32(x, start[k]), delta[k]));
  }
  return a;
}

// 32 elements per turn, then 8 through a padded vector. K (the breakpoints) a template
// argument: the sums stay in registers (a run-time count spilled them to the stack).
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

// ---- direct: float16 -> FP8 in registers.

// The four sign/exponent/mantissa FP8 formats (slot); others go through the table.
struct Fp8Bits {
  bool supported = false;
  int bias = 0;
  double max_finite = 0.0;
  int slot = 0;
  double min_normal() const { return std::ldexp(1.0, 1 - bias); }
};

inline Fp8Bits fp8_bits(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float8_e4m3fn:
      return {true, 7, 448.0, 0};
    case c10::ScalarType::Float8_e5m2:
      return {true, 15, 57344.0, 1};
    case c10::ScalarType::Float8_e4m3fnuz:
      return {true, 8, 240.0, 2};
    case c10::ScalarType::Float8_e5m2fnuz:
      return {true, 16, 57344.0, 3};
    default:
      return {};
  }
}

#ifdef FP8_DUMMY_X86

// 8 halves -> 8 FP8 bytes (M mantissa bits, bias B; fnuz: no -0) for finite |h|; kTiny: for
// |h| <= the smallest normal (+-1e-3 in e4m3fn), where the subnormal rule gives every result.
template <int M, int B, bool kFnuz, bool kTiny>
__attribute__((target("avx2,f16c"))) inline void fp8_from_half8_avx2(__m128i h, uint8_t* dst) {
  constexpr int kShift = 23 - M;
  const __m256i bits = _mm256_castps_si256(_mm256_cvtph_ps(h));  // exact
  const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(INT32_MIN)), 24);
  const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(INT32_MAX));
  const __m256 a = _mm256_castsi256_ps(mag);
  // Subnormal results: the count of smallest subnormals (2^(1-B-M)), rounded to nearest
  // even (a count of 2^M is the smallest normal's code, as it should be).
  const __m256 inv_unit = _mm256_castsi256_ps(_mm256_set1_epi32((127 + B + M - 1) << 23));
  const __m256 count = _mm256_round_ps(_mm256_mul_ps(a, inv_unit),  // power of two: exact
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i code = _mm256_cvttps_epi32(count);
  if (!kTiny) {
    // Normal results: the float's bits rounded to M mantissa bits, nearest even (a carry
    // into the exponent is right), the exponent rebiased.
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
  if (i < n) {
    alignas(16) uint16_t in[8] = {};
    uint8_t out[8];
    for (int64_t j = i; j < n; ++j) in[j - i] = h[j];
    fp8_from_half8_avx2<M, B, kFnuz, kTiny>(_mm_load_si128(reinterpret_cast<const __m128i*>(in)),
                                            out);
    for (int64_t j = i; j < n; ++j) dst[j] = out[j - i];
  }
}

inline void fp8_from_halves_avx2(const uint16_t* h, int64_t n, const Fp8Bits& f, bool tiny,
                                 uint8_t* dst) {
  using Fn = void (*)(const uint16_t*, int64_t, uint8_t*);
  static constexpr Fn fns[2][4] = {
      {fp8_from_halves_avx2_impl<3, 7, false, false>,
       fp8_from_halves_avx2_impl<2, 15, false, false>, fp8_from_halves_avx2_impl<3, 8, true, false>,
       fp8_from_halves_avx2_impl<2, 16, true, false>},
      {fp8_from_halves_avx2_impl<3, 7, false, true>, fp8_from_halves_avx2_impl<2, 15, false, true>,
       fp8_from_halves_avx2_impl<3, 8, true, true>, fp8_from_halves_avx2_impl<2, 16, true, true>}};
  fns[tiny][f.slot](h, n, dst);
}

// Whether both forms equal `table` (torch's copy_) on every half in their ranges; once.
inline bool fp8_direct_ok(const Fp8Bits& f, const uint8_t* table) {
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
