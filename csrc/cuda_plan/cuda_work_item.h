// One work item of the fused CUDA kernels (torch-free; the kernels and their emulators run
// these very functions): the Philox calls of G consecutive reference threads at one grid step,
// word ii of them G consecutive elements: 16 for the linear kernel (one 16-byte store from a
// 16-byte aligned start, else checked 4-byte stores), 4 for the strided and batched kernels.
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

constexpr int kGroup = 4;  // reference threads per work item: the batched and strided kernels
// The linear per-tensor kernel's work item: 16 reference threads, so that a word of their calls
// fills 16 consecutive bytes (one 16-byte store); the round keys, the walk and the addresses are
// made once per 64 elements, and the 16 calls share the first round's products
// (cuda::philox_words_run); products alike across them are left to the compiler to share.
constexpr int kLinearGroup = 16;

// The reference threads a kernel's work item takes: kLinearGroup for the linear per-tensor
// kernel, kGroup for the strided one.
FP8_DUMMY_HD constexpr int item_group(bool linear) { return linear ? kLinearGroup : kGroup; }

// The per-tensor kernels' block, and the blocks of it per SM their __launch_bounds__ ask for
// (cuda/init_kernel.cuh says why: the linear kernel's 128 registers a thread, 2 blocks of 256
// threads filling an SM's 64K; one block lets ptxas give the strided kernel's layout walk the
// registers it needs). The launcher's grid is one resident wave (the occupancy API's blocks per
// SM, at least these); the emulator's default grid is these blocks per SM.
constexpr int kBlock = 256;
constexpr int kLinearBlocksPerSm = 2;
constexpr int kStridedBlocksPerSm = 1;

// Work items of one launch: T / group groups times the steps, < 2^28: 32-bit indices suffice.
FP8_DUMMY_HD uint32_t work_items(int64_t threads, int64_t steps, int group = kGroup) {
  return static_cast<uint32_t>(threads / group * steps);
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
  bool use_hw;   // packed hardware conversion allowed (same bytes for these bounds)
  bool aligned;  // linear layout and data + start is 4-byte aligned: 4-byte stores
  // Linear kernel (kLinearGroup): count where data + start is 16-byte aligned, else 0; an item
  // wholly below it takes 16-byte stores (one compare: no flag for nvcc to unswitch on).
  uint32_t wide_count;
  cuda::StridedLayout layout;  // read only by the strided (kLinear = false) code
};

// Word ii of four consecutive subsequences' calls -> four FP8 bytes, low byte first (use_hw:
// a.use_hw, passed apart so that the caller can make it a constant).
template <cuda::Fp8Format F>
FP8_DUMMY_HD uint32_t four_bytes(const cuda::Words4* words, int ii, const ItemArgs& a,
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

// Sixteen bytes at a 16-byte aligned p, b[0]'s low byte first: one 16-byte store.
FP8_DUMMY_HD void store_16(uint8_t* p, const uint32_t* b) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = make_uint4(b[0], b[1], b[2], b[3]);
#else
  std::memcpy(p, b, 16);  // the emulator; hosts are little endian like GPUs
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

// The bytes of a work item of G reference threads: bytes[ii][j] holds the elements of word ii
// of subsequences idx + 4j .. idx + 4j + 3, low byte first (use_hw as a.use_hw).
template <cuda::Fp8Format F, int G>
FP8_DUMMY_HD void item_bytes(const ItemArgs& a, const cuda::Words4 (&words)[G], bool use_hw,
                             uint32_t (&bytes)[4][G / 4]) {
  FP8_DUMMY_UNROLL
  for (int ii = 0; ii < 4; ++ii) {
    FP8_DUMMY_UNROLL
    for (int j = 0; j < G / 4; ++j) bytes[ii][j] = four_bytes<F>(words + 4 * j, ii, a, use_hw);
  }
}

// Stores a work item's bytes (item_bytes): subsequences idx .. idx + G - 1 at grid step `step`.
template <bool kLinear, int G>
FP8_DUMMY_HD void store_item(const ItemArgs& a, const uint32_t (&bytes)[4][G / 4], int64_t idx,
                             uint32_t step) {
  static_assert(G == kGroup || G == kLinearGroup, "a word's G bytes: one 4- or 16-byte store");
  // A word's G bytes in one store: data + start aligned to G bytes (idx is a multiple of G and
  // T of 256, so then is every word's first byte).
  if (kLinear && (G == kLinearGroup || a.aligned)) {
    const uint32_t end = G == kGroup ? static_cast<uint32_t>(a.count) : a.wide_count;
    // The common case, the whole item inside the piece: four stores, no check per word (the
    // bytes the checked stores below make then).
    // With T <= 2^28, an item's elements m0 + ii T + q < T (4 steps) <= count + 4T < 2^31
    // (count <= 2^30): 32-bit arithmetic is exact.
    const auto threads = static_cast<uint32_t>(a.threads);
    const uint32_t m0 = static_cast<uint32_t>(idx) + threads * (4u * step);
    if (a.threads <= (int64_t{1} << 28) && m0 + 3u * threads + (G - 1u) < end) {
      // One 64-bit address per item, word ii then ii * T further: the data + start + m sum of
      // each word, which nvcc remade per word, is made once.
      uint8_t* const p = a.data + a.start + m0;
      FP8_DUMMY_UNROLL
      for (int ii = 0; ii < 4; ++ii) {
        if (G == kGroup) {
          store_word(p + ii * a.threads, bytes[ii][0]);
        } else {
          store_16(p + ii * a.threads, bytes[ii]);
        }
      }
      return;
    }
  }
  FP8_DUMMY_UNROLL
  for (int ii = 0; ii < 4; ++ii) {
    const int64_t m = cuda::element_of(idx, step, ii, a.threads);
    if (m >= a.count) break;  // later words land further on
    FP8_DUMMY_UNROLL
    for (int j = 0; j < G / 4; ++j) {
      if (m + 4 * j >= a.count) break;
      store4<kLinear>(a, m + 4 * j, bytes[ii][j]);
    }
  }
}

// Work item (subsequences idx .. idx + G - 1, grid step `step`) at Philox offset `offset` under
// the seed's round keys `keys` (cuda::philox_keys, computed once per kernel): every element it
// owns.
template <cuda::Fp8Format F, bool kLinear, int G = kGroup>
FP8_DUMMY_HD void fill_item(const ItemArgs& a, const cuda::PhiloxKeys& keys, uint64_t offset,
                            int64_t idx, uint32_t step) {
  cuda::Words4 words[G];
  if (G == kLinearGroup) {
    // idx + G - 1 < T <= 2^28: the subsequences' high words are 0. (The kGroup kernels make
    // each call apart: with the shared first round ptxas made the strided kernel's sm_100 code
    // 23% longer.)
    cuda::philox_words_run<G>(keys, static_cast<uint32_t>(idx), offset, step, words);
  } else {
    FP8_DUMMY_UNROLL
    for (int q = 0; q < G; ++q) words[q] = cuda::philox_words(keys, idx + q, offset, step);
  }
  uint32_t bytes[4][G / 4];
  // One test of the hardware conversion per item, not one per pair of bytes.
  if (cuda::hw_limit(F, cuda::E4m3fnOverflow::kSaturate) > 0.0f && a.use_hw) {
    item_bytes<F, G>(a, words, true, bytes);
  } else {
    item_bytes<F, G>(a, words, false, bytes);
  }
  store_item<kLinear, G>(a, bytes, idx, step);
}

template <cuda::Fp8Format F, bool kLinear, int G = kGroup>
FP8_DUMMY_HD void fill_item(const ItemArgs& a, uint64_t seed, uint64_t offset, int64_t idx,
                            uint32_t step) {
  fill_item<F, kLinear, G>(
      a, cuda::philox_keys(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)), offset,
      idx, step);
}

// One thread of a per-tensor kernel's launch (the kernel and its emulator): the work items
// first, first + stride, ... of `steps` grid steps, each of item_group(kLinear) subsequences.
template <cuda::Fp8Format F, bool kLinear>
FP8_DUMMY_HD void fill_thread(const ItemArgs& a, const cuda::PhiloxKeys& keys, uint64_t offset,
                              uint32_t steps, uint32_t first, uint32_t stride) {
  constexpr int G = item_group(kLinear);
  for (WorkWalk walk(static_cast<uint32_t>(a.threads / G), first, stride); walk.step < steps;
       walk.next()) {
#if defined(__CUDA_ARCH__)
    // groups * steps < 2^28 (work_items): told to the compiler, the subsequences' high words
    // are 0 and their index a 32-bit shift, not a wide multiply per item.
    __builtin_assume(walk.group < (1u << 28));
#endif
    fill_item<F, kLinear, G>(a, keys, offset, static_cast<int64_t>(walk.group) * G, walk.step);
  }
}

}  // namespace cuda_kernels
}  // namespace fp8_dummy
