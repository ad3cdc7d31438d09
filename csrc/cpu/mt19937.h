// torch's CPU generator stream (at::mt19937) continued in bulk: the block step and tempering
// (portable, AVX2), n words drawn on several threads, each jumping to its range.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/MT19937RNGEngine.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/simd.h"
#include "cpu/threads.h"

namespace fp8_dummy {
namespace cpu {

constexpr int kMtN = 624;
constexpr int kMtM = 397;
constexpr uint32_t kMtMatrixA = 0x9908b0dfu;
constexpr uint32_t kMtUpper = 0x80000000u;
constexpr uint32_t kMtLower = 0x7fffffffu;

// One word of the step: `u` gives the top bit, `v` the low 31 bits and the odd/even choice.
inline uint32_t mt_twist_word(uint32_t far, uint32_t u, uint32_t v) {
  const uint32_t y = (u & kMtUpper) | (v & kMtLower);
  return far ^ (y >> 1) ^ ((v & 1u) ? kMtMatrixA : 0u);
}

// Word i of the new block (far word new from i = 227 on; the last uses the new word 0).
inline uint32_t mt_new_word(const uint32_t* old, const uint32_t* out, int i) {
  const uint32_t far = i + kMtM < kMtN ? old[i + kMtM] : out[i + kMtM - kMtN];
  const uint32_t v = i + 1 < kMtN ? old[i + 1] : out[0];
  return mt_twist_word(far, old[i], v);
}

// Out of place (old block -> new block), so a caller can keep consecutive blocks.
inline void mt_twist_scalar(const uint32_t* old, uint32_t* out) {
  int i = 0;
  for (; i < kMtN - kMtM; ++i) out[i] = mt_twist_word(old[i + kMtM], old[i], old[i + 1]);
  for (; i < kMtN - 1; ++i) out[i] = mt_twist_word(out[i + kMtM - kMtN], old[i], old[i + 1]);
  out[i] = mt_twist_word(out[i + kMtM - kMtN], old[i], out[0]);
}

inline uint32_t mt_temper(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

#ifdef FP8_DUMMY_X86

__attribute__((target("avx2"))) inline __m256i mt_twist8_avx2(__m256i far, __m256i u, __m256i v) {
  const __m256i y = _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(int(kMtUpper))),
                                    _mm256_and_si256(v, _mm256_set1_epi32(int(kMtLower))));
  const __m256i odd =  // all ones where v is odd
      _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_and_si256(v, _mm256_set1_epi32(1)));
  const __m256i mag = _mm256_and_si256(odd, _mm256_set1_epi32(int(kMtMatrixA)));
  return _mm256_xor_si256(_mm256_xor_si256(far, _mm256_srli_epi32(y, 1)), mag);
}

__attribute__((target("avx2"))) inline __m256i load8(const uint32_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

__attribute__((target("avx2"))) inline void store8(uint32_t* p, __m256i x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x);
}

// 8 lanes: dependencies reach 227 and 397 words on; only the vectors straddling a wrap
// (224..231, 616..623) go word by word.
__attribute__((target("avx2"))) inline void mt_twist_avx2(const uint32_t* old, uint32_t* out) {
  int i = 0;
  for (; i + 8 <= kMtN - kMtM; i += 8) {
    store8(out + i, mt_twist8_avx2(load8(old + i + kMtM), load8(old + i), load8(old + i + 1)));
  }
  for (; i < kMtN - kMtM + 5; ++i) out[i] = mt_new_word(old, out, i);
  for (; i + 8 < kMtN; i += 8) {
    store8(out + i,
           mt_twist8_avx2(load8(out + i + kMtM - kMtN), load8(old + i), load8(old + i + 1)));
  }
  for (; i < kMtN; ++i) out[i] = mt_new_word(old, out, i);
}

__attribute__((target("avx2"))) inline __m256i mt_temper8_avx2(__m256i y) {
  y = _mm256_xor_si256(y, _mm256_srli_epi32(y, 11));
  y = _mm256_xor_si256(
      y, _mm256_and_si256(_mm256_slli_epi32(y, 7), _mm256_set1_epi32(int(0x9d2c5680u))));
  y = _mm256_xor_si256(
      y, _mm256_and_si256(_mm256_slli_epi32(y, 15), _mm256_set1_epi32(int(0xefc60000u))));
  return _mm256_xor_si256(y, _mm256_srli_epi32(y, 18));
}

#endif  // FP8_DUMMY_X86

using TwistFn = void (*)(const uint32_t*, uint32_t*);

// False for a state torch's engine would read out of bounds from (set_state accepts it).
inline bool stream_usable(const at::mt19937_data_pod& pod) {
  return pod.left_ >= 1 && pod.left_ <= kMtN && pod.next_ <= static_cast<uint32_t>(kMtN) &&
         pod.next_ + static_cast<uint32_t>(pod.left_) - 1 <= static_cast<uint32_t>(kMtN);
}

inline bool same_engine(const at::mt19937_data_pod& a, const at::mt19937_data_pod& b) {
  return a.seed_ == b.seed_ && a.left_ == b.left_ && a.seeded_ == b.seeded_ && a.next_ == b.next_ &&
         a.state_ == b.state_;
}

// A jump costs about 1-2 Mi words (benchmarks/bench_jump.py): no thread for fewer.
constexpr int64_t kMinWordsPerThread = int64_t{1} << 21;
constexpr int64_t kJumpWords = int64_t{1} << 20;  // thread 0's extra share: it does not jump

// Threads for n words: torch's setting, fewer for small draws, one in a parallel region.
inline int draw_threads(int64_t n) {
  if (at::in_parallel_region()) return 1;
  const int64_t by_size = n / kMinWordsPerThread;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), by_size)));
}

// Draws `count` words (word `first` on) on this thread: consume(first, words, len) gets the
// untempered words of a block or less, in order.
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
  alignas(64) uint32_t blocks[2][kMtN];
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

// Thread t draws [start[t], start[t + 1]); thread 0 a little more (it does not jump); starts
// are multiples of `align`.
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

// Advances `pod` by k words, as k calls of at::mt19937 would (mt19937_jump.h).
inline void mt_jump(at::mt19937_data_pod& pod, uint64_t k, bool avx2);

// Draws n words from `pod` (stream_usable) on up to `threads` threads, each but the first
// jumping a copy to its range: the same words for any thread count, pod left after them.
template <class Consume>
void draw_words(at::mt19937_data_pod& pod, int64_t n, TwistFn twist, bool avx2, int threads,
                const Consume& consume, int64_t align = 1) {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  if (threads == 1) return draw_range(pod, 0, n, twist, consume);
  const std::vector<int64_t> start = thread_starts(n, threads, align);
  std::vector<at::mt19937_data_pod> ends(static_cast<size_t>(threads), pod);
  run_on_threads(threads, [&](int t) {
    if (t > 0) mt_jump(ends[t], static_cast<uint64_t>(start[t]), avx2);
    draw_range(ends[t], start[t], start[t + 1] - start[t], twist, consume);
  });
  pod = ends[threads - 1];
}

}  // namespace cpu
}  // namespace fp8_dummy

#include "cpu/mt19937_jump.h"  // mt_jump, after what it builds on
