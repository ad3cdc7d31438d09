// Continues a CPU generator's mt19937 stream in bulk: the words torch's generator would hand
// out next, one per element, in order, made a block (624 words) at a time, and transformed
// to float16 bits by several threads. The engine's bookkeeping, as at::mt19937 keeps it:
// `left_ - 1` words of the current block remain, starting at `next_`; when none remain the
// next draw steps the block first (a freshly seeded engine has left_ == 1: none remain).
// After drawing, the same fields say where the stream stands, so writing the state back
// leaves the generator exactly where torch's own uniform_ would have left it.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/MT19937RNGEngine.h>

#include <algorithm>
#include <cstdint>
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

// Blocks per round: each round steps up to this many blocks serially, then transforms them
// in parallel. The ring holds one more, the block the previous round ended in.
constexpr int kRoundBlocks = 64;

// Draws n words from the stream in `pod` (which must be stream_usable) and advances it.
// consume(first, halves, len) receives the float16 bits of elements [first, first + len):
// called from several threads at once for disjoint ranges, ranges up to one block long.
// flush(begin, len) is called once a round's elements [begin, begin + len) are all consumed,
// from the calling thread, before the next round starts.
template <class Consume, class Flush>
void draw_halves(at::mt19937_data_pod& pod, int64_t n, const UniformParams& params,
                 const Kernels& kernels, int64_t min_items_per_thread, Consume&& consume,
                 Flush&& flush) {
  struct Item {
    const uint32_t* words;
    int64_t len;
    int64_t first;
  };
  // Scratch: (kRoundBlocks + 1) * 2.5 KiB = 162.5 KiB, plus the round's item list.
  std::vector<uint32_t> ring(static_cast<size_t>(kRoundBlocks + 1) * kMtN);
  std::vector<Item> items;
  items.reserve(kRoundBlocks + 1);
  const uint32_t* cur = pod.state_.data();
  int slot = kRoundBlocks;  // the slot `cur` would occupy; the next block goes to slot 0
  int64_t pos = pod.next_;
  int64_t avail = pod.left_ - 1;
  bool stepped = false;
  int64_t done = 0;
  while (done < n) {
    const int64_t round_begin = done;
    items.clear();
    while (done < n && static_cast<int>(items.size()) < kRoundBlocks) {
      if (avail == 0) {
        slot = slot == kRoundBlocks ? 0 : slot + 1;
        uint32_t* next = ring.data() + static_cast<size_t>(slot) * kMtN;
        kernels.twist(cur, next);
        cur = next;
        pos = 0;
        avail = kMtN;
        stepped = true;
      }
      const int64_t take = std::min(avail, n - done);
      items.push_back({cur + pos, take, done});
      pos += take;
      avail -= take;
      done += take;
    }
    const auto work = [&](int64_t begin, int64_t end) {
      alignas(32) uint16_t halves[kMtN];
      for (int64_t i = begin; i < end; ++i) {
        const Item& it = items[static_cast<size_t>(i)];
        kernels.transform(it.words, it.len, /*temper=*/true, params, halves);
        consume(it.first, static_cast<const uint16_t*>(halves), it.len);
      }
    };
    const auto count = static_cast<int64_t>(items.size());
    if (min_items_per_thread <= 0 || count < 2 * min_items_per_thread) {
      work(0, count);
    } else {
      at::parallel_for(0, count, min_items_per_thread, work);
    }
    flush(round_begin, done - round_begin);
  }
  if (stepped) std::copy(cur, cur + kMtN, pod.state_.begin());
  pod.next_ = static_cast<uint32_t>(pos);
  pod.left_ = static_cast<int>(avail + 1);
}

}  // namespace cpu
}  // namespace fp8_dummy
