// Continues a CPU generator's mt19937 stream in bulk: the words torch's generator would hand
// out next, one per element, in order, made a block (624 words) at a time and handed to a
// consumer (which tempers and transforms them), by several threads when the tensor is large.
// The engine's bookkeeping, as at::mt19937 keeps it: `left_ - 1` words of the current block
// remain, starting at `next_`; when none remain the next draw steps the block first (a
// freshly seeded engine has left_ == 1: none remain). After drawing, the same fields say
// where the stream stands, so writing the state back leaves the generator where torch's own
// kernel would leave it.
//
// Threads: the n words are split into one contiguous range per thread. Thread 0 starts from
// the generator's state; thread t > 0 jumps a copy of it to its range's start
// (mt19937_jump.h, ~0.3-1 ms) and makes only its own range. The generator's new state is the
// last range's end state. Which thread makes a word cannot change it, so the bytes are the
// same for every thread count. Thread 0, which does not jump, gets a larger range so all
// finish together. Below kMinWordsPerThread words per thread no thread is started at all
// (tiny tensors stay on the caller's thread: cheaper, and nothing to go wrong after a fork).
// (at::parallel_for would run serially here: its OpenMP body is inline in torch's headers
// and this extension is not built with -fopenmp; so std::thread.)
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/MT19937RNGEngine.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/fp8_runs.h"
#include "cpu/mt19937_avx512.h"
#include "cpu/mt19937_jump.h"
#include "cpu/random_bytes_transform.h"
#include "cpu/threads.h"
#include "cpu/uniform_transform.h"

namespace fp8_dummy {
namespace cpu {

enum class SimdLevel : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

inline const char* level_name(SimdLevel level) {
  return level == SimdLevel::kAvx512 ? "avx512" : level == SimdLevel::kAvx2 ? "avx2" : "portable";
}

using TwistFn = void (*)(const uint32_t*, uint32_t*);
using TransformFn = void (*)(const uint32_t*, int64_t, bool, const UniformParams&, uint16_t*);
using BytesFn = void (*)(const uint32_t*, int64_t, const ByteParams&, uint8_t*);
using RunsFn = void (*)(const uint32_t*, int64_t, uint32_t, const Fp8Runs&, uint8_t*);

// One SIMD level's kernels (the same words and bytes at every level).
struct Kernels {
  SimdLevel level;
  TwistFn twist;
  TransformFn transform;  // tempers, then torch's float16 uniform_ transform
  BytesFn bytes;          // tempers, then random_'s byte
  RunsFn runs;            // tempers, masks, then the FP8 byte from its runs (fp8_runs.h)
};

inline bool cpu_has_level(SimdLevel level) {
  if (level == SimdLevel::kAvx512) return cpu_has_avx512();
  if (level == SimdLevel::kAvx2) return cpu_has_avx2_fma_f16c();
  return true;
}

// The kernels of `level`, which the caller has checked the CPU runs (cpu_has_level).
inline Kernels kernels_for(SimdLevel level) {
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

// False for a state torch's own engine would read out of bounds from (set_state accepts
// left_ and next_ independently): such a state goes to torch's own kernel.
inline bool stream_usable(const at::mt19937_data_pod& pod) {
  return pod.left_ >= 1 && pod.left_ <= kMtN && pod.next_ <= static_cast<uint32_t>(kMtN) &&
         pod.next_ + static_cast<uint32_t>(pod.left_) - 1 <= static_cast<uint32_t>(kMtN);
}

// Per thread, at least this many words, or no thread is started. A jump costs about as
// much as making 1-2 Mi words, so a smaller range would spend most of its time jumping
// (benchmarks/bench_jump.py measures both; RESULTS.md).
constexpr int64_t kMinWordsPerThread = int64_t{1} << 21;
// How many more words thread 0 makes than the others, for the jump it does not make.
constexpr int64_t kJumpWords = int64_t{1} << 20;

// Threads to use for n words: torch's intra-op setting, fewer for small draws, one inside a
// parallel region of torch's (as at::parallel_for would).
inline int draw_threads(int64_t n) {
  if (at::in_parallel_region()) return 1;
  const int64_t by_size = n / kMinWordsPerThread;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), by_size)));
}

// Draws `count` words from `pod` (positioned at word `first` of the draw) on this thread and
// leaves it after them. consume(first, words, len) receives the untempered words of
// [first, first + len), a block or less, in order.
template <class Consume>
void draw_range(at::mt19937_data_pod& pod, int64_t first, int64_t count, TwistFn twist,
                const Consume& consume) {
  const int64_t head = std::min<int64_t>(pod.left_ - 1, count);  // rest of the current block
  if (head > 0) {
    consume(first, static_cast<const uint32_t*>(pod.state_.data() + pod.next_), head);
    pod.next_ += static_cast<uint32_t>(head);
    pod.left_ -= static_cast<int>(head);
  }
  const int64_t rest = count - head;
  if (rest == 0) return;
  alignas(64) uint32_t blocks[2][kMtN];  // out-of-place twists, alternating
  const uint32_t* prev = pod.state_.data();
  int64_t len = 0;
  for (int64_t done = 0, b = 0; done < rest; done += len, ++b) {
    uint32_t* cur = blocks[b & 1];
    twist(prev, cur);
    prev = cur;
    len = std::min<int64_t>(kMtN, rest - done);
    consume(first + head + done, static_cast<const uint32_t*>(cur), len);
  }
  std::copy(prev, prev + kMtN, pod.state_.begin());
  pod.next_ = static_cast<uint32_t>(len);
  pod.left_ = static_cast<int>(kMtN + 1 - len);
}

// The word ranges of draw_words' threads: thread t draws [start[t], start[t + 1]). Thread 0
// gets `bonus` more than the others (for the jump it skips); every start is a multiple of
// `align` (a range may then be empty), so a consumer can keep whole aligned pieces on one
// thread.
inline std::vector<int64_t> thread_starts(int64_t n, int threads, int64_t align = 1) {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  std::vector<int64_t> start(static_cast<size_t>(threads) + 1, 0);
  const int64_t bonus = std::min(kJumpWords, n / (2 * threads));
  const int64_t share = (n - bonus) / threads;
  for (int t = 1; t < threads; ++t) {
    const int64_t raw = bonus + share * t + std::min<int64_t>(t, (n - bonus) % threads);
    start[t] = std::max(start[t - 1], raw / align * align);
  }
  start[threads] = n;
  return start;
}

// Draws n words from the stream in `pod` (which must be stream_usable) on up to `threads`
// threads and advances it. consume is called from several threads at once, for disjoint
// ranges (each range's pieces in order; the ranges are thread_starts(n, threads, align)'s).
template <class Consume>
void draw_words(at::mt19937_data_pod& pod, int64_t n, const Kernels& kernels, int threads,
                const Consume& consume, int64_t align = 1) {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  if (threads == 1) return draw_range(pod, 0, n, kernels.twist, consume);
  const std::vector<int64_t> start = thread_starts(n, threads, align);
  const bool avx2_jump = kernels.level != SimdLevel::kPortable;
  std::vector<at::mt19937_data_pod> ends(static_cast<size_t>(threads), pod);
  run_on_threads(threads, [&](int t) {
    at::mt19937_data_pod& local = ends[t];
    if (t > 0) mt_jump(local, static_cast<uint64_t>(start[t]), avx2_jump);
    draw_range(local, start[t], start[t + 1] - start[t], kernels.twist, consume);
  });
  pod = ends[threads - 1];
}

}  // namespace cpu
}  // namespace fp8_dummy
