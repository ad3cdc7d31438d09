// The fused CUDA kernel: Philox4x32-10, the uniform mapping, the float16 rounding and
// the FP8 conversion in registers, each output byte written once, no scratch. It
// reproduces one launch of torch's uniform_ on the float16 temp (REFERENCE.md §3):
// reference thread idx, grid step k, word ii -> element idx + T * (4k + ii).
//
// Work split: consecutive elements belong to consecutive reference threads (different
// Philox subsequences), so one kernel thread takes the calls of kGroup = 4 consecutive
// subsequences at one step and owns 4 consecutive bytes per word: one 32-bit store
// per word on the linear (dense) layout, and a warp's store covers 128 contiguous
// bytes. Work items (4 subsequences x 1 step) are handed out grid-stride, step-major,
// so a kernel's grid is sized for occupancy, not tied to the reference's T.
#pragma once

#include <ATen/cuda/PhiloxUtils.cuh>
#include <cstdint>

#include "fp8_dummy/cuda/fp8_convert.h"
#include "fp8_dummy/cuda/layout.h"
#include "fp8_dummy/cuda/philox.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {
namespace cuda_kernels {

constexpr int kBlock = 256;
constexpr int kGroup = 4;  // reference threads per kernel thread

// One reference launch (one 32-bit piece) of the temp.
struct PieceArgs {
  uint8_t* data;    // self's data pointer: element offsets of `layout` count from here
  int64_t start;    // the piece's first element in the temp's memory order
  int64_t count;    // elements in the piece (<= 2^30)
  int64_t threads;  // the reference launch's thread count T (a multiple of 256)
  int64_t steps;    // its grid-stride steps
  at::PhiloxCudaState philox;
  cuda::UniformParams uniform;
  cuda::E4m3fnOverflow overflow;
  bool use_hw;   // packed hardware conversion allowed (same bytes for these bounds)
  bool aligned;  // linear layout and data + start is 4-byte aligned: word stores
  cuda::StridedLayout layout;
};

// Work items of a piece: (T / 4) subsequence groups times the steps; < 2^28 for a
// piece of at most 2^30 elements, so 32-bit item indices suffice. Element and
// address arithmetic stays 64-bit.
FP8_DUMMY_HD uint32_t work_items(int64_t threads, int64_t steps) {
  return static_cast<uint32_t>(threads / kGroup * steps);
}

// Word ii of the four subsequences' calls -> four FP8 bytes, low byte first.
template <cuda::Fp8Format F>
__device__ __forceinline__ uint32_t four_bytes(const cuda::Words4 (&words)[kGroup], int ii,
                                               const PieceArgs& a) {
  const uint32_t h01 = cuda::uniform_half2(words[0].w[ii], words[1].w[ii], a.uniform);
  const uint32_t h23 = cuda::uniform_half2(words[2].w[ii], words[3].w[ii], a.uniform);
  const uint32_t lo = cuda::half2_to_fp8x2<F>(h01, a.use_hw, a.overflow);
  const uint32_t hi = cuda::half2_to_fp8x2<F>(h23, a.use_hw, a.overflow);
  return lo | (hi << 16);
}

// Bytes for elements m .. m + 3 of the piece (m < count); those past the end dropped.
template <bool kLinear>
__device__ __forceinline__ void store4(const PieceArgs& a, int64_t m, uint32_t bytes) {
  const int64_t pos = a.start + m;
  if (kLinear) {
    uint8_t* p = a.data + pos;
    if (a.aligned && m + 3 < a.count) {
      *reinterpret_cast<uint32_t*>(p) = bytes;
      return;
    }
#pragma unroll
    for (int q = 0; q < kGroup; ++q) {
      if (m + q < a.count) p[q] = static_cast<uint8_t>(bytes >> (8 * q));
    }
  } else {
#pragma unroll
    for (int q = 0; q < kGroup; ++q) {
      if (m + q < a.count)
        a.data[a.layout.offset(pos + q)] = static_cast<uint8_t>(bytes >> (8 * q));
    }
  }
}

// Walks work item w = step * groups + group, w = thread, thread + stride, ... < steps *
// groups, keeping (step, group) in step with an add and a carry rather than a
// division per item.
struct WorkWalk {
  uint32_t groups, step, group, stride_steps, stride_groups;

  __device__ WorkWalk(uint32_t groups_) : groups(groups_) {
    const uint32_t w = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t stride = gridDim.x * blockDim.x;
    step = w / groups;
    group = w - step * groups;
    stride_steps = stride / groups;
    stride_groups = stride - stride_steps * groups;
  }
  __device__ void next() {
    step += stride_steps;
    group += stride_groups;
    if (group >= groups) {
      group -= groups;
      ++step;
    }
  }
};

template <cuda::Fp8Format F, bool kLinear>
__global__ void __launch_bounds__(kBlock) init_fp8_kernel(const PieceArgs a) {
  // Graph-capture safe: the seed and offset are read from device memory when captured.
  const auto seeds = at::cuda::philox::unpack(a.philox);
  const uint64_t seed = std::get<0>(seeds);
  const uint64_t offset = std::get<1>(seeds);
  const auto steps = static_cast<uint32_t>(a.steps);
  for (WorkWalk walk(static_cast<uint32_t>(a.threads / kGroup)); walk.step < steps; walk.next()) {
    const int64_t idx = static_cast<int64_t>(walk.group) * kGroup;
    cuda::Words4 words[kGroup];
#pragma unroll
    for (int q = 0; q < kGroup; ++q)
      words[q] = cuda::philox_words(seed, idx + q, offset, walk.step);
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      const int64_t m = cuda::element_of(idx, walk.step, ii, a.threads);
      if (m >= a.count) break;  // later words land further on
      store4<kLinear>(a, m, four_bytes<F>(words, ii, a));
    }
  }
}

// Our hardware pair conversion of all 65536 float16 bit patterns (the one-time probe
// compares it with torch's copy_ before the kernel may use it).
template <cuda::Fp8Format F>
__global__ void hw_table_kernel(uint8_t* out) {
  const uint32_t pair = blockIdx.x * blockDim.x + threadIdx.x;
  if (pair >= 32768) return;
  const uint32_t halves = (2 * pair) | ((2 * pair + 1) << 16);
  const uint16_t bytes = cuda::half2_to_fp8x2<F>(halves, true, cuda::E4m3fnOverflow::kSaturate);
  out[2 * pair] = static_cast<uint8_t>(bytes);
  out[2 * pair + 1] = static_cast<uint8_t>(bytes >> 8);
}

// The benchmark's roofline: the same Philox calls, folded into one word per thread.
__global__ void __launch_bounds__(kBlock)
    philox_roofline_kernel(int32_t* out, int64_t threads, int64_t steps, uint64_t seed) {
  uint32_t fold = 0;
  const auto last = static_cast<uint32_t>(steps);
  for (WorkWalk walk(static_cast<uint32_t>(threads / kGroup)); walk.step < last; walk.next()) {
    const int64_t idx = static_cast<int64_t>(walk.group) * kGroup;
#pragma unroll
    for (int q = 0; q < kGroup; ++q) {
      const cuda::Words4 words = cuda::philox_words(seed, idx + q, 0, walk.step);
      fold ^= words.w[0] ^ words.w[1] ^ words.w[2] ^ words.w[3];
    }
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<int32_t>(fold);
}

}  // namespace cuda_kernels
}  // namespace fp8_dummy
