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

// Word ii of the four subsequences' calls -> four FP8 bytes, low byte first.
template <cuda::Fp8Format F>
FP8_DUMMY_HD uint32_t four_bytes(const cuda::Words4 (&words)[kGroup], int ii, const ItemArgs& a) {
  const uint32_t h01 = cuda::uniform_half2(words[0].w[ii], words[1].w[ii], a.uniform);
  const uint32_t h23 = cuda::uniform_half2(words[2].w[ii], words[3].w[ii], a.uniform);
  const uint32_t lo = cuda::half2_to_fp8x2<F>(h01, a.use_hw, a.overflow);
  const uint32_t hi = cuda::half2_to_fp8x2<F>(h23, a.use_hw, a.overflow);
  return lo | (hi << 16);
}

// Bytes for elements m .. m + 3 of the piece (m < count); those past the end dropped.
template <bool kLinear>
FP8_DUMMY_HD void store4(const ItemArgs& a, int64_t m, uint32_t bytes) {
  const int64_t pos = a.start + m;
  if (kLinear) {
    uint8_t* p = a.data + pos;
    if (a.aligned && m + 3 < a.count) {
#if defined(__CUDA_ARCH__)
      *reinterpret_cast<uint32_t*>(p) = bytes;
#else
      std::memcpy(p, &bytes, 4);  // the emulator; hosts are little endian like GPUs
#endif
      return;
    }
    FP8_DUMMY_UNROLL
    for (int q = 0; q < kGroup; ++q) {
      if (m + q < a.count) p[q] = static_cast<uint8_t>(bytes >> (8 * q));
    }
  } else {
    FP8_DUMMY_UNROLL
    for (int q = 0; q < kGroup; ++q) {
      if (m + q < a.count)
        a.data[a.layout.offset(pos + q)] = static_cast<uint8_t>(bytes >> (8 * q));
    }
  }
}

// Work item (subsequences idx .. idx + 3, grid step `step`) at Philox (seed, offset): every
// element it owns.
template <cuda::Fp8Format F, bool kLinear>
FP8_DUMMY_HD void fill_item(const ItemArgs& a, uint64_t seed, uint64_t offset, int64_t idx,
                            uint32_t step) {
  cuda::Words4 words[kGroup];
  FP8_DUMMY_UNROLL
  for (int q = 0; q < kGroup; ++q) words[q] = cuda::philox_words(seed, idx + q, offset, step);
  FP8_DUMMY_UNROLL
  for (int ii = 0; ii < 4; ++ii) {
    const int64_t m = cuda::element_of(idx, step, ii, a.threads);
    if (m >= a.count) break;  // later words land further on
    store4<kLinear>(a, m, four_bytes<F>(words, ii, a));
  }
}

}  // namespace cuda_kernels
}  // namespace fp8_dummy
