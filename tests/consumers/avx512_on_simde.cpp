// Runs the AVX-512 kernels of the CPU stream (csrc/cpu/kernels_avx512.h) on a CPU without
// AVX-512: the file is compiled with its target attribute removed, over SIMDe's portable
// implementations of the AVX-512 intrinsics (AVX2/FMA/F16C stay native: -mavx2 -mfma
// -mf16c), and its results are compared with the portable kernels, word for word and byte
// for byte. This checks the kernels' logic (lanes, loop bounds, wraps, tails, masks); the
// instructions themselves are checked only on AVX-512 hardware (the pytest levels there).
// Built and run by tests/test_init_cpu_avx512_emulated.py.
#include <immintrin.h>  // the native intrinsics first; SIMDe's aliases come after them
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

// SIMDe 0.7 has no _mm512_cvtps_ph: two native 8-lane conversions of the halves.
static inline __m256i cvtps_ph_512(simde__m512 v, int) {
  simde__m512_private p = simde__m512_to_private(v);
  return _mm256_set_m128i(_mm256_cvtps_ph(p.m256[1], 0), _mm256_cvtps_ph(p.m256[0], 0));
}
#define _mm512_cvtps_ph(v, imm) cvtps_ph_512(v, imm)
// Nor _mm512_cvtepi32_epi8 (vpmovdb: each lane's low byte).
static inline __m128i cvtepi32_epi8_512(simde__m512i v) {
  simde__m512i_private p = simde__m512i_to_private(v);
  alignas(16) uint8_t out[16];
  for (int i = 0; i < 16; ++i) out[i] = static_cast<uint8_t>(p.i32[i]);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(out));
}
#define _mm512_cvtepi32_epi8(v) cvtepi32_epi8_512(v)
// Nor _mm512_cvtepi32_ps: two native 8-lane conversions.
static inline simde__m512 cvtepi32_ps_512(simde__m512i v) {
  simde__m512i_private p = simde__m512i_to_private(v);
  simde__m512_private r;
  r.m256[0] = _mm256_cvtepi32_ps(p.m256i[0]);
  r.m256[1] = _mm256_cvtepi32_ps(p.m256i[1]);
  return simde__m512_from_private(r);
}
#define _mm512_cvtepi32_ps(v) cvtepi32_ps_512(v)
#define FP8_DUMMY_TARGET_AVX512
#define FP8_DUMMY_OPAQUE_512(x) __asm__("" : "+m"(x))

#include "cpu/kernels_avx512.h"

using namespace fp8_dummy::cpu;

static int failures = 0;
static int checks = 0;

static void check(bool ok, const char* what, int detail) {
  ++checks;
  if (!ok && failures++ < 20) std::printf("FAIL %s (%d)\n", what, detail);
}

int main() {
  std::mt19937 rng(15);
  std::vector<uint32_t> block(kMtN), a(kMtN), b(kMtN);
  for (int trial = 0; trial < 300; ++trial) {
    for (auto& w : block) w = rng();
    mt_twist_scalar(block.data(), a.data());
    mt_twist_avx512(block.data(), b.data());
    check(a == b, "twist", trial);
  }
  // The transform, both formulas, FMA or not, the three clamp kinds, tempered or not, and
  // lengths that leave tails of every size.
  const double bounds[][2] = {{-500.0, 500.0}, {0.0, 1.0},      {-1e-3, 1e-3}, {-3.0, 60000.0},
                              {-1.0, 0.0},     {-65504.0, 0.0}, {0.25, 0.25}};
  std::vector<uint32_t> words(4099);
  for (auto& w : words) w = rng();
  std::vector<uint16_t> h1(words.size()), h2(words.size());
  int id = 0;
  for (const auto& bd : bounds) {
    for (const Formula f : {Formula::kBits24, Formula::kBits11}) {
      for (const bool fma : {true, false}) {
        for (const bool temper : {true, false}) {
          const auto p =
              make_uniform_params(bd[0], bd[1], Transform{f, fma, f == Formula::kBits24});
          for (const int64_t n :
               {int64_t{4099}, int64_t{16}, int64_t{15}, int64_t{1}, int64_t{624}}) {
            transform_block_scalar(words.data(), n, temper, p, h1.data());
            transform_block_avx512(words.data(), n, temper, p, h2.data());
            check(std::memcmp(h1.data(), h2.data(), n * sizeof(uint16_t)) == 0, "transform", id);
          }
          ++id;
        }
      }
    }
  }
  std::vector<uint8_t> b1(words.size()), b2(words.size());
  const ByteParams ranges[] = {{256, -128}, {256, 0}, {1, 255}, {64, -128}, {197, 3}, {12, -5}};
  for (const auto& r : ranges) {
    for (const int64_t n : {int64_t{4099}, int64_t{17}, int64_t{3}}) {
      bytes_block_scalar(words.data(), n, r, b1.data());
      bytes_block_avx512(words.data(), n, r, b2.data());
      check(std::memcmp(b1.data(), b2.data(), n) == 0, "bytes", static_cast<int>(r.range));
    }
  }
  // FP8 bytes from runs (fp8_bytes.h): a made-up table monotone in the half's value (as
  // float16 -> FP8 is), runs from a narrow and a wider range.
  static uint8_t table[65536];
  for (int h = 0; h < 65536; ++h) {
    table[h] = static_cast<uint8_t>(detail::half_order(static_cast<uint16_t>(h)) >> 11);
  }
  for (const auto& bd : {std::array<double, 2>{-1e-3, 1e-3}, std::array<double, 2>{0.1, 0.13}}) {
    const auto p = make_uniform_params(bd[0], bd[1], Transform{Formula::kBits24, true, true});
    Fp8Runs runs;
    check(make_fp8_runs(p, table, &runs) && runs.breaks > 0, "runs found", runs.breaks);
    for (const int64_t n : {int64_t{4099}, int64_t{31}, int64_t{2}}) {
      runs_block_scalar(words.data(), n, p.mask, runs, b1.data());
      runs_block_avx512(words.data(), n, p.mask, runs, b2.data());
      check(std::memcmp(b1.data(), b2.data(), n) == 0, "runs", runs.breaks);
    }
  }
  std::printf("%d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}
