// The fused per-tensor kernel: one reference launch of uniform_ on the float16 temp and the
// conversion in registers, work items (cuda_plan/cuda_work_item.h) grid-stride (docs/cuda.md).
#pragma once

// <tuple> before ATen: its philox::unpack (UnpackRaw.cuh) returns a std::tuple without
// including <tuple>, and with libstdc++ 13 nothing else brings it when this header comes first
// (benchmarks/sass_kernels.cu). clang-format would sort it below.
// clang-format off
#include <tuple>
// clang-format on
#include <ATen/cuda/PhiloxUtils.cuh>
#include <cstdint>

#include "cuda_plan/cuda_work_item.h"
#include "fp8_dummy/cuda/fp8_convert.h"
#include "fp8_dummy/cuda/philox.h"

namespace fp8_dummy {
namespace cuda_kernels {

// One reference launch (one 32-bit piece) of the temp.
struct PieceArgs {
  ItemArgs item;
  int64_t steps;  // the reference launch's grid-stride steps
  at::PhiloxCudaState philox;
};

// Under a bare __launch_bounds__(kBlock), ptxas held the strided kernel (its layout walk's 64-bit
// divisions) to 64 registers on sm_100 and spilled 16 bytes; asking for one block per SM
// lets it take 96. The linear kernel's item holds 16 Philox calls' words (64 registers) at
// once: at 3 blocks per SM (80 registers) ptxas spilled 188 bytes on sm_90; at 2 it takes 128
// (16 warps per SM, each with 16 independent calls in flight).
template <cuda::Fp8Format F, bool kLinear>
__global__ void __launch_bounds__(kBlock, kLinear ? kLinearBlocksPerSm : kStridedBlocksPerSm)
    init_fp8_kernel(const PieceArgs a) {
  // Graph-capture safe: the seed and offset are read from device memory when captured.
  const auto seeds = at::cuda::philox::unpack(a.philox);
  const uint64_t seed = std::get<0>(seeds);
  const uint64_t offset = std::get<1>(seeds);
  const cuda::PhiloxKeys keys =
      cuda::philox_keys(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  ItemArgs item = a.item;
  // Linear: element m of the piece is byte start + m, and the host passes data + start with
  // start 0 (launch_piece); the sum made in the kernel was remade by ptxas per work item.
  if (kLinear) item.start = 0;
  fill_thread<F, kLinear>(item, keys, offset, static_cast<uint32_t>(a.steps),
                          blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

}  // namespace cuda_kernels
}  // namespace fp8_dummy
