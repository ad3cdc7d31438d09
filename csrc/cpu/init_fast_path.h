// The fast exact CPU path for FP8 tensors: the generator's mt19937 stream continued in bulk
// by our own (SIMD) code, torch's per-element float16 transform of the installed version,
// and the float16 -> FP8 table, fused per block, no scratch proportional to the tensor; the
// generator's state is written back as torch's uniform_ would leave it.
//
// Whether it may be used is decided once per process (fast_config()), by evidence rather
// than by a list of versions, so that a torch release we have not seen keeps the fast path
// when its kernel is one we know:
//  - the candidates are the transforms torch has used (uniform_transform.h): 11 random
//    bits (torch <= 2.11); 24 bits with or without a fused multiply-add, with or without
//    the replacement of half(high) by half(low) (torch >= 2.12: FMA in its AVX2/AVX512
//    kernels, none in its DEFAULT one). The one the torch version and CPU capability
//    suggest is tried first, the others after it;
//  - a candidate is taken when one of our kernel sets (AVX-512 and AVX2 where the CPU has
//    them, the portable one) gives torch's own uniform_ bytes and final generator state on
//    the self-check: a scratch generator, from mid-block, bounds where FMA and clamping
//    show, on one thread and split over 2 and 3 threads (so the jump-ahead and the split
//    are checked too). A kernel set that disagrees is not used by `auto`;
//  - if no candidate matches, the fast path stays off and the exact path is used, and
//    cpu_fast_path_info() says why in one line.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Version.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/version.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/proof.h"
#include "cpu/mt19937_stream.h"

namespace fp8_dummy {
namespace cpu {

// The torch versions whose CPU uniform_ kernels were read (docs/contract.md R4) and whose
// transform the self-check found: on these the fast path is expected to be on.
constexpr bool kVersionKnown =
    TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9 && TORCH_VERSION_MINOR <= 15;

struct FastConfig {
  bool found = false;  // a candidate transform matched torch on some kernel set
  Transform transform{Formula::kBits24, true, true};
  bool ok[3] = {};  // by SimdLevel: the CPU runs it and its kernels passed the check
  std::string info;
  // The widest level that passed; found is true, so one did.
  SimdLevel best() const {
    return ok[2] ? SimdLevel::kAvx512 : ok[1] ? SimdLevel::kAvx2 : SimdLevel::kPortable;
  }
};

// Draws n elements' float16 bits from `gen` (locked here) into `out` and advances it.
// False, with nothing drawn, if the generator's state is one torch's engine would misread.
inline bool fast_draw_halves(at::CPUGeneratorImpl* gen, int64_t n, const UniformParams& params,
                             const Kernels& kernels, int threads, uint16_t* out) {
  std::lock_guard<std::mutex> lock(gen->mutex_);
  auto pod = gen->engine().data();
  if (!stream_usable(pod)) return false;
  draw_words(pod, n, kernels, threads, [&](int64_t first, const uint32_t* words, int64_t len) {
    kernels.transform(words, len, /*temper=*/true, params, out + first);
  });
  at::mt19937 engine;
  engine.set_data(pod);
  gen->set_engine(engine);
  return true;
}

inline bool same_engine(const at::mt19937_data_pod& a, const at::mt19937_data_pod& b) {
  return a.seed_ == b.seed_ && a.left_ == b.left_ && a.seeded_ == b.seeded_ && a.next_ == b.next_ &&
         a.state_ == b.state_;
}

// One kernel set against torch's uniform_: several bounds, from mid-block, 2^16 + 11 elements
// (over 100 blocks: every wrap of the step and the tail handling take part), on 1, 2 and 3
// threads (draw_words splits whatever the size when told to: the jumps take part).
inline bool self_check(const Kernels& kernels, const Transform& transform,
                       std::ostringstream& why) {
  constexpr int64_t kN = (int64_t{1} << 16) + 11;
  constexpr uint64_t kSeed = 20240607;
  // [-500, 500]: about 30 of 2^16 elements differ between FMA and a separate multiply-add;
  // [0, 1]: about 16 hit the clamp; [-1e-3, 1e-3]: the default bounds, subnormal halves.
  const double bounds[][2] = {{-500.0, 500.0}, {0.0, 1.0}, {-1e-3, 1e-3}, {-3.0, 60000.0}};
  int round = 0;
  for (const auto& b : bounds) {
    const int threads = 1 + (round++ % 3);  // 1, 2, 3, 1: one and several ranges
    auto g_ref = at::detail::createCPUGenerator(kSeed);
    auto g_ours = at::detail::createCPUGenerator(kSeed);
    auto* ref_impl = at::check_generator<at::CPUGeneratorImpl>(g_ref);
    auto* ours_impl = at::check_generator<at::CPUGeneratorImpl>(g_ours);
    for (int i = 0; i < 7; ++i) {  // leave both mid-block
      ref_impl->random();
      ours_impl->random();
    }
    auto expected = at::empty({kN}, at::TensorOptions().dtype(at::kHalf));
    expected.uniform_(b[0], b[1], g_ref);
    std::vector<uint16_t> got(static_cast<size_t>(kN));
    const auto params = make_uniform_params(b[0], b[1], transform);
    if (!fast_draw_halves(ours_impl, kN, params, kernels, threads, got.data())) {
      why << " (state unusable)";
      return false;
    }
    if (std::memcmp(got.data(), expected.const_data_ptr(), sizeof(uint16_t) * kN) != 0) {
      why << " (bytes differ at [" << b[0] << ", " << b[1] << "])";
      return false;
    }
    if (!same_engine(ref_impl->engine().data(), ours_impl->engine().data())) {
      why << " (generator state differs)";
      return false;
    }
  }
  return true;
}

inline std::string describe(const Transform& t) {
  std::ostringstream out;
  out << "formula=" << static_cast<int>(t.formula) << " fma=" << t.fma << " clamp=" << t.clamp;
  return out.str();
}

// The candidates, the one this torch version and CPU capability suggest first.
inline std::vector<Transform> candidate_transforms(bool default_capability) {
#ifdef FP8_DUMMY_X86
  const bool fma_guess = !default_capability;
#else
  (void)default_capability;
  const bool fma_guess = true;  // GCC and Clang contract a * b + c where FMA exists, by default
#endif
  const Transform bits11{Formula::kBits11, false, false};
  const bool old = TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR <= 11;
  std::vector<Transform> out;
  if (old) out.push_back(bits11);
  for (const bool clamp : {true, false}) {
    for (const bool fma : {fma_guess, !fma_guess}) out.push_back({Formula::kBits24, fma, clamp});
  }
  if (!old) out.push_back(bits11);
  return out;
}

// Which transform this torch runs and which of our kernel sets reproduce it, searched once
// per process through the proof mechanism (common/proof.h): each (candidate, level) pair is
// a key of its own, reported but silent when refused (candidates are expected to fail);
// finding none is a refusal of the fast path itself, which warns. Each call's branch is then
// proven on its own (cpu/init_cpu.cpp).
inline const FastConfig& fast_config() {
  static FastConfig config;
  static std::once_flag once;
  std::call_once(once, [] {
    std::ostringstream info;
    const std::string capability = at::get_cpu_capability();
    info << "torch=" << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR
         << (kVersionKnown ? "" : "(not seen before)") << " capability=" << capability;
    const auto candidates = candidate_transforms(capability == "DEFAULT");
    std::string why[3];
    for (const Transform& t : candidates) {
      bool any = false;
      for (int level = 2; level >= 0; --level) {
        why[level].clear();
        const auto l = static_cast<SimdLevel>(level);
        if (!cpu_has_level(l)) {
          config.ok[level] = false;
          continue;
        }
        const std::string key =
            std::string("cpu.uniform_: ") + describe(t) + " simd=" + level_name(l);
        config.ok[level] = proof::proven(
            key,
            [&] {
              std::ostringstream out;
              const bool same = self_check(kernels_for(l), t, out);
              why[level] = out.str();
              return proof::Verdict{same, same ? "" : "float16 stream" + out.str()};
            },
            proof::Warn::kNever);
        any = any || config.ok[level];
      }
      if (any) {
        config.found = true;
        config.transform = t;
        break;
      }
    }
    if (!config.found) {
      info << " fast path off: none of the " << candidates.size()
           << " known transforms gives torch's uniform_ bytes (first: "
           << describe(candidates.front()) << why[2] << why[1] << why[0] << ")";
      config.info = info.str();
      proof::record(std::string("cpu.init_: fast path, capability=") + capability, false,
                    "none of the known uniform_ transforms gives this torch's bytes");
      return;
    }
    info << " " << describe(config.transform)
         << (describe(config.transform) == describe(candidates.front())
                 ? ""
                 : " (not the one this version suggests)");
    for (int level = 2; level >= 0; --level) {
      const auto l = static_cast<SimdLevel>(level);
      info << " " << level_name(l) << "="
           << (!cpu_has_level(l)  ? "unavailable"
               : config.ok[level] ? "pass"
                                  : "FAIL")
           << why[level];
    }
    config.info = info.str();
  });
  return config;
}

// FP8_DUMMY_CPU_PATH (read on every call), shared by init_ and random_: auto (also unset or
// empty): the fast path at the widest level that passed its self-check, else torch's own
// kernel (exact); exact: always that; fast: the fast path at the widest level the CPU runs;
// avx512, avx2, portable: the fast path at that level (an error where the CPU lacks it).
// The forced values skip the self-check's verdict (for tests and benchmarks).
enum class CpuPath { kAuto, kExact, kFast, kAvx512, kAvx2, kPortable };

inline CpuPath cpu_path_from_env(const char* op) {
  const char* env = std::getenv("FP8_DUMMY_CPU_PATH");
  const std::string value = env ? env : "";
  if (value.empty() || value == "auto") return CpuPath::kAuto;
  if (value == "exact") return CpuPath::kExact;
  if (value == "fast") return CpuPath::kFast;
  if (value == "avx512") return CpuPath::kAvx512;
  if (value == "avx2") return CpuPath::kAvx2;
  if (value == "portable") return CpuPath::kPortable;
  TORCH_CHECK(false, "fp8_dummy.", op, ": FP8_DUMMY_CPU_PATH must be one of auto, exact, fast, ",
              "avx512, avx2, portable; got '", value, "'");
}

// The level a forced fast path (kFast .. kPortable) runs at; an error if the CPU lacks it.
inline SimdLevel forced_level(CpuPath path, const char* op) {
  if (path == CpuPath::kFast) {
    return cpu_has_level(SimdLevel::kAvx512) ? SimdLevel::kAvx512
           : cpu_has_level(SimdLevel::kAvx2) ? SimdLevel::kAvx2
                                             : SimdLevel::kPortable;
  }
  const SimdLevel level = path == CpuPath::kAvx512 ? SimdLevel::kAvx512
                          : path == CpuPath::kAvx2 ? SimdLevel::kAvx2
                                                   : SimdLevel::kPortable;
  TORCH_CHECK(cpu_has_level(level), "fp8_dummy.", op, ": FP8_DUMMY_CPU_PATH=", level_name(level),
              ": this CPU does not run it (",
              level == SimdLevel::kAvx512 ? "needs AVX512F, AVX2, FMA and F16C"
                                          : "needs AVX2, FMA and F16C",
              ")");
  return level;
}

}  // namespace cpu
}  // namespace fp8_dummy
