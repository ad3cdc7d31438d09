// Continues a CPU generator's mt19937 stream in bulk: the words torch's generator would hand
// out next, one per element, in order, made a block (624 words) at a time and transformed
// to float16 bits, by several threads when the tensor is large. The engine's bookkeeping, as
// at::mt19937 keeps it: `left_ - 1` words of the current block remain, starting at `next_`;
// when none remain the next draw steps the block first (a freshly seeded engine has
// left_ == 1: none remain). After drawing, the same fields say where the stream stands, so
// writing the state back leaves the generator where torch's own uniform_ would leave it.
//
// Threads: block b of the draw covers a fixed range of elements, so which thread transforms
// it cannot change any byte. Stepping the state is cheap next to the transform (~0.12 vs
// ~0.4 ns per word with AVX2), so every thread steps through the blocks itself, from the
// same starting state, and transforms only the groups of blocks it claims (an atomic
// counter hands them out in order, so a thread slowed down by a busy machine claims fewer).
// No locks, no shared ring, no thread waits for another. (at::parallel_for would run
// serially here: its OpenMP body is inline in torch's headers and this extension is not
// built with -fopenmp; so std::thread.)
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/MT19937RNGEngine.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

#include "cpu/uniform_transform.h"

namespace fp8_dummy {
namespace cpu {

using TwistFn = void (*)(const uint32_t*, uint32_t*);
using TransformFn = void (*)(const uint32_t*, int64_t, bool, const UniformParams&, uint16_t*);

struct Kernels {
  TwistFn twist;
  TransformFn transform;
};

inline Kernels portable_kernels() { return {&mt_twist_scalar, &transform_block_scalar}; }

#ifdef FP8_DUMMY_X86
inline Kernels avx2_kernels() { return {&mt_twist_avx2, &transform_block_avx2}; }
#endif

// False for a state torch's own engine would read out of bounds from (set_state accepts
// left_ and next_ independently): such a state goes to the exact path, which runs torch.
inline bool stream_usable(const at::mt19937_data_pod& pod) {
  return pod.left_ >= 1 && pod.left_ <= kMtN && pod.next_ <= static_cast<uint32_t>(kMtN) &&
         pod.next_ + static_cast<uint32_t>(pod.left_) - 1 <= static_cast<uint32_t>(kMtN);
}

constexpr int64_t kGroupBlocks = 32;          // ~20 Ki elements per turn of a thread
constexpr int64_t kMinBlocksPerThread = 256;  // ~160 Ki elements, ~0.1 ms: worth a thread

// Threads to use for `blocks` blocks: torch's intra-op setting, fewer for small draws, one
// inside a parallel region of torch's (as at::parallel_for would).
inline int draw_threads(int64_t blocks) {
  if (at::in_parallel_region()) return 1;
  const int64_t by_size = blocks / kMinBlocksPerThread;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), by_size)));
}

// Draws n words from the stream in `pod` (which must be stream_usable) and advances it.
// consume(first, halves, len) receives the float16 bits of elements [first, first + len),
// a block or less; it is called from up to `threads` threads at once, for disjoint ranges.
template <class Consume>
void draw_halves(at::mt19937_data_pod& pod, int64_t n, const UniformParams& params,
                 const Kernels& kernels, int threads, const Consume& consume) {
  alignas(32) uint16_t halves[kMtN];
  // What is left of the current block comes first, on this thread.
  const int64_t head = std::min<int64_t>(pod.left_ - 1, n);
  if (head > 0) {
    kernels.transform(pod.state_.data() + pod.next_, head, /*temper=*/true, params, halves);
    consume(int64_t{0}, static_cast<const uint16_t*>(halves), head);
  }
  const int64_t rest = n - head;
  if (rest == 0) {
    pod.next_ += static_cast<uint32_t>(n);
    pod.left_ -= static_cast<int>(n);
    return;
  }
  const int64_t blocks = (rest + kMtN - 1) / kMtN;  // block b: elements head + 624 b ...
  const int64_t last_len = rest - (blocks - 1) * kMtN;
  const int64_t groups = (blocks + kGroupBlocks - 1) / kGroupBlocks;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, groups)));
  std::atomic<int64_t> next_group{0};
  std::vector<uint32_t> final_state(kMtN);  // the last block: the generator's new state
  auto run = [&](uint32_t* state) {         // two blocks of state, 5 KiB
    alignas(32) uint16_t h[kMtN];
    const uint32_t* prev = pod.state_.data();
    int64_t b = 0;  // blocks stepped so far by this thread
    for (;;) {
      const int64_t g = next_group.fetch_add(1, std::memory_order_relaxed);
      if (g >= groups) return;
      const int64_t end = std::min(blocks, (g + 1) * kGroupBlocks);
      for (; b < end; ++b) {
        uint32_t* cur = state + (b & 1) * kMtN;
        kernels.twist(prev, cur);
        prev = cur;
        if (b < g * kGroupBlocks) continue;  // another thread's block: only step past it
        const int64_t len = b + 1 == blocks ? last_len : int64_t{kMtN};
        kernels.transform(cur, len, /*temper=*/true, params, h);
        consume(head + b * kMtN, static_cast<const uint16_t*>(h), len);
      }
      if (end == blocks) std::copy(prev, prev + kMtN, final_state.begin());
    }
  };
  std::vector<uint32_t> states(static_cast<size_t>(threads) * 2 * kMtN);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(run, states.data() + t * 2 * kMtN);
    } catch (const std::system_error&) {
      break;  // the system would not start more: the threads there are take all groups
    }
  }
  run(states.data());
  for (auto& t : pool) t.join();
  std::copy(final_state.begin(), final_state.end(), pod.state_.begin());
  pod.next_ = static_cast<uint32_t>(last_len);
  pod.left_ = static_cast<int>(kMtN - last_len + 1);
}

}  // namespace cpu
}  // namespace fp8_dummy
