// One work item of the fused CUDA kernels (torch-free; the kernels and their emulators run
// these very functions): the Philox calls of 4 consecutive reference threads at one grid step,
// word ii of them 4 consecutive elements (one 32-bit store on an aligned dense tensor).
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8_dummy/cuda/config.h"
#include "fp8_dummy/cuda/fp8_convert.h"
#include "fp8_dummy/cuda/layout.h"
#include "fp8_dummy/cuda/philox.h"
#include "fp8_dummy/cuda/uniform.h"

#if defined(__CUDA_ARCH__)
#define FP8_DUMMY_UNROLL _Pragma("unroll")
#else
#define FP8_DUMMY_UNROLL
#endif

namespace fp8_dummy {
namespace cuda_kernels {

constexpr int kGroup = 4;  // reference threads per work item

// Work items of one launch: T / 4 groups times the steps, < 2^28: 32-bit indices suffice.
FP8_DUMMY_HD uint32_t work_items(int64_t threads, int64_t steps) {
  return static_cast<uint32_t>(threads / kGroup * steps);
}

// Work items w = step * groups + group for w = first, first + stride, ... (a thread's
// grid-stride share), (step, group) kept with an add and a carry, not a division per item.
struct WorkWalk {
  uint32_t groups, step, group, stride_steps, stride_groups;

  FP8_DUMMY_HD WorkWalk(uint32_t groups_, uint32_t first, uint32_t stride) : groups(groups_) {
    step = first / groups;
    group = first - step * groups;
    stride_steps = stride / groups;
    stride_groups = stride - stride_steps * groups;
  }
  FP8_DUMMY_HD void next() {
    step += stride_steps;
    group += stride_groups;
    if (group >= groups) {
      group -= groups;
      ++step;
    }
  }
};

// What a work item needs of its launch (one 32-bit piece of one tensor).
struct ItemArgs {
  uint8_t* data;    // the tensor's data pointer: element offsets of `layout` count from here
  int64_t start;    // the piece's first element in the temp's memory order
  int64_t count;    // elements in the piece (<= 2^30)
  int64_t threads;  // the reference launch's thread count T (a multiple of 256)
  cuda::UniformParams uniform;
  cuda::E4m3fnOverflow overflow;
  bool use_hw;                 // packed hardware conversion allowed (same bytes for these bounds)
  bool aligned;                // linear layout and data + start is 4-byte aligned: word stores
  cuda::StridedLayout layout;  // read only by the strided (kLinear = false) code
};

// Word ii of the four subsequences' calls -> four FP8 bytes, low byte first (use_hw: a.use_hw,
// passed apart so that the caller can make it a constant).
template <cuda::Fp8Format F>
FP8_DUMMY_HD uint32_t four_bytes(const cuda::Words4 (&words)[kGroup], int ii, const ItemArgs& a,
                                 bool use_hw) {
  const uint32_t h01 = cuda::uniform_half2(words[0].w[ii], words[1].w[ii], a.uniform);
  const uint32_t h23 = cuda::uniform_half2(words[2].w[ii], words[3].w[ii], a.uniform);
  const uint32_t lo = cuda::half2_to_fp8x2<F>(h01, use_hw, a.overflow);
  const uint32_t hi = cuda::half2_to_fp8x2<F>(h23, use_hw, a.overflow);
  return lo | (hi << 16);
}

// Four bytes at a 4-byte aligned p, low byte first.
FP8_DUMMY_HD void store_word(uint8_t* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint32_t*>(p) = bytes;
#else
  std::memcpy(p, &bytes, 4);  // the emulator; hosts are little endian like GPUs
#endif
}

// Bytes for elements m .. m + 3 of the piece (m < count); those past the end dropped.
template <bool kLinear>
FP8_DUMMY_HD void store4(const ItemArgs& a, int64_t m, uint32_t bytes) {
  const int64_t pos = a.start + m;
  if (kLinear) {
    uint8_t* p = a.data + pos;
    if (a.aligned && m + 3 < a.count) {
      store_word(p, bytes);
      return;
    }
    FP8_DUMMY_UNROLL
    for (int q = 0; q < kGroup; ++q) {
      if (m + q < a.count) p[q] = static_cast<uint8_t>(bytes >> (8 * q));
    }
  } else {
    // Consecutive elements of the walk: the first one's offset by division, each next one a
    // stride further while it stays in the innermost dimension (else divided again).
    int64_t inner = 0;
    int64_t off = a.layout.offset(pos, &inner);
    FP8_DUMMY_UNROLL
    for (int q = 0; q < kGroup; ++q) {
      if (m + q >= a.count) break;
      if (q > 0) {
        if (++inner < a.layout.inner_size) {
          off += a.layout.inner_stride;
        } else {
          off = a.layout.offset(pos + q, &inner);
        }
      }
      a.data[off] = static_cast<uint8_t>(bytes >> (8 * q));
    }
  }
}

// The bytes of a work item's words (fill_item; use_hw as a.use_hw).
template <cuda::Fp8Format F, bool kLinear>
FP8_DUMMY_HD void store_item(const ItemArgs& a, const cuda::Words4 (&words)[kGroup], int64_t idx,
                             uint32_t step, bool use_hw) {
  if (kLinear && a.aligned) {
    // The common case, the whole item inside the piece: four word stores, no check per word
    // (the same stores store4 makes for each word then).
    // With T <= 2^28, an item's elements m0 + ii T < T (4 steps) <= count + 4T < 2^31
    // (count <= 2^30): 32-bit arithmetic is exact.
    const auto threads = static_cast<uint32_t>(a.threads);
    const uint32_t m0 = static_cast<uint32_t>(idx) + threads * (4u * step);
    if (a.threads <= (int64_t{1} << 28) &&
        m0 + 3u * threads + 3u < static_cast<uint32_t>(a.count)) {
      // One 64-bit address per item, word ii then ii * T further: the data + start + m sum of
      // each word, which nvcc remade per word, is made once.
      uint8_t* const p = a.data + a.start + m0;
      FP8_DUMMY_UNROLL
      for (int ii = 0; ii < 4; ++ii) {
        store_word(p + ii * a.threads, four_bytes<F>(words, ii, a, use_hw));
      }
      return;
    }
  }
  FP8_DUMMY_UNROLL
  for (int ii = 0; ii < 4; ++ii) {
    const int64_t m = cuda::element_of(idx, step, ii, a.threads);
    if (m >= a.count) break;  // later words land further on
    store4<kLinear>(a, m, four_bytes<F>(words, ii, a, use_hw));
  }
}

// Work item (subsequences idx .. idx + 3, grid step `step`) at Philox offset `offset` under the
// seed's round keys `keys` (cuda::philox_keys, computed once per kernel): every element it owns.
template <cuda::Fp8Format F, bool kLinear>
FP8_DUMMY_HD void fill_item(const ItemArgs& a, const cuda::PhiloxKeys& keys, uint64_t offset,
                            int64_t idx, uint32_t step) {
  cuda::Words4 words[kGroup];
  FP8_DUMMY_UNROLL
  for (int q = 0; q < kGroup; ++q) words[q] = cuda::philox_words(keys, idx + q, offset, step);
  // One test of the hardware conversion per item, not one per pair of bytes.
  if (cuda::hw_limit(F, cuda::E4m3fnOverflow::kSaturate) > 0.0f && a.use_hw) {
    store_item<F, kLinear>(a, words, idx, step, true);
  } else {
    store_item<F, kLinear>(a, words, idx, step, false);
  }
}

template <cuda::Fp8Format F, bool kLinear>
FP8_DUMMY_HD void fill_item(const ItemArgs& a, uint64_t seed, uint64_t offset, int64_t idx,
                            uint32_t step) {
  fill_item<F, kLinear>(
      a, cuda::philox_keys(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)), offset,
      idx, step);
}

}  // namespace cuda_kernels
}  // namespace fp8_dummy
