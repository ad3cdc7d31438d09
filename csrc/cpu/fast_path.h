// What the CPU fast paths of init_ and random_ share (the generator's mt19937 stream made by
// our SIMD kernels on several threads): each level's kernels, the draw, FP8_DUMMY_CPU_PATH,
// the once-per-process search for the kernels that reproduce torch, the probes' comparison.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "common/proof.h"
#include "cpu/fp8_bytes.h"
#include "cpu/kernels_avx512.h"
#include "cpu/mt19937.h"
#include "cpu/transforms.h"

namespace fp8_dummy {
namespace cpu {

using TransformFn = void (*)(const uint32_t*, int64_t, bool, const UniformParams&, uint16_t*);
using BytesFn = void (*)(const uint32_t*, int64_t, const ByteParams&, uint8_t*);
using RunsFn = void (*)(const uint32_t*, int64_t, uint32_t, const Fp8Runs&, uint8_t*);

// One SIMD level's kernels (the same words and bytes at every level).
struct Kernels {
  SimdLevel level;
  TwistFn twist;
  TransformFn transform;  // tempers (if asked), then torch's float16 uniform_ transform
  BytesFn bytes;          // tempers, then random_'s byte
  RunsFn runs;            // tempers, masks, then the FP8 byte from its runs
};

inline Kernels kernels_for(SimdLevel level) {  // a level the CPU runs
#ifdef FP8_DUMMY_X86
  if (level == SimdLevel::kAvx512) {
    return {level, &mt_twist_avx512, &transform_block_avx512, &bytes_block_avx512,
            &runs_block_avx512};
  }
  if (level == SimdLevel::kAvx2) {
    return {level, &mt_twist_avx2, &transform_block_avx2, &bytes_block_avx2, &runs_block_avx2};
  }
#endif
  return {SimdLevel::kPortable, &mt_twist_scalar, &transform_block_scalar, &bytes_block_scalar,
          &runs_block_scalar};
}

// Draws n words of gen's stream (locked, as torch's kernels do) on `threads` threads and
// writes the state back; false, drawing nothing, for a state torch's engine would misread.
template <class Consume>
bool draw(at::CPUGeneratorImpl* gen, int64_t n, const Kernels& k, int threads,
          const Consume& consume, int64_t align = 1) {
  std::lock_guard<std::mutex> lock(gen->mutex_);
  auto pod = gen->engine().data();
  if (!stream_usable(pod)) return false;
  draw_words(pod, n, k.twist, k.level != SimdLevel::kPortable, threads, consume, align);
  at::mt19937 engine;
  engine.set_data(pod);
  gen->set_engine(engine);
  return true;
}

// What the search found: per level, whether our kernels gave torch's bytes; one line of info.
struct FastConfig {
  bool found = false;  // init_: a candidate transform matched torch on some level
  Transform transform{Formula::kBits24, true, true};
  bool ok[3] = {};  // by SimdLevel
  std::string info;
  bool complete = true;  // false: a probe failed for lack of memory (no fast path this call)
};
const FastConfig& fast_config();  // init_'s uniform_ transform (random_'s: random_cpu.cpp)

// search()'s result once complete, kept in `done`; until then each call searches again.
const FastConfig& settled(std::atomic<const FastConfig*>& done, std::mutex& mutex,
                          FastConfig (*search)());

// The level a call of `op` runs our kernels at, or nullopt for the exact path, by
// FP8_DUMMY_CPU_PATH (read on every call): auto/unset: the widest level config() passed;
// exact; fast: the widest the CPU runs; avx512, avx2, portable (an error where the CPU lacks
// it). None while config() is incomplete. Every call is proven all the same.
std::optional<SimdLevel> fast_level(const char* op, const FastConfig& (*config)());

// Our fill and torch's on two tensors from `make`, generators seeded with `seed` and drawn
// `skip` times: the same bytes and generator state afterwards. `ours` false: it refused.
proof::Verdict against_torch(const std::function<at::Tensor()>& make, uint64_t seed, int skip,
                             const std::function<bool(at::Tensor&, at::Generator&)>& ours,
                             const std::function<void(at::Tensor&, at::Generator&)>& torch_fill,
                             const std::string& what);

}  // namespace cpu
}  // namespace fp8_dummy
