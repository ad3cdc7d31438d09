// The CPU kernels' SIMD levels, picked at run time: portable, AVX2 (with FMA, F16C) and
// AVX-512F on x86-64, as target attributes on a baseline build. -DFP8_DUMMY_NO_SIMD: portable
// only (what other architectures run).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FP8_DUMMY_NO_SIMD)
#define FP8_DUMMY_X86 1
// GCC's AVX-512 headers trip its uninitialized-value warnings (their undefined lanes).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace fp8_dummy {
namespace cpu {

enum class SimdLevel : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

inline const char* level_name(SimdLevel level) {
  return level == SimdLevel::kAvx512 ? "avx512" : level == SimdLevel::kAvx2 ? "avx2" : "portable";
}

inline bool cpu_has_level(SimdLevel level) {
#ifdef FP8_DUMMY_X86
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  return level == SimdLevel::kPortable || (level == SimdLevel::kAvx2 ? avx2 : avx512);
#else
  return level == SimdLevel::kPortable;
#endif
}

inline SimdLevel widest_level() {
  return cpu_has_level(SimdLevel::kAvx512) ? SimdLevel::kAvx512
         : cpu_has_level(SimdLevel::kAvx2) ? SimdLevel::kAvx2
                                           : SimdLevel::kPortable;
}

}  // namespace cpu
}  // namespace fp8_dummy
