// The batched kernel of init_many_: dense tensors of one FP8 dtype, each as its own init_
// would fill it, in one launch (cuda_plan/cuda_batch_table.h; the per-tensor kernel's work item).
// A header apart from init_kernel.cuh, whose non-template kernels live in one file only.
#pragma once

#include <cstdint>

#include "cuda_plan/cuda_batch_table.h"

namespace fp8_dummy {
namespace cuda_kernels {

template <cuda::Fp8Format F>
__global__ void __launch_bounds__(kTile)
    init_many_fp8_kernel(const BatchPiece* pieces, int64_t num_pieces, int64_t tiles,
                         const __grid_constant__ BatchCall call) {
  FillDense<F> fill{call};
  for_each_batch_item(pieces, num_pieces, tiles, blockIdx.x, gridDim.x, threadIdx.x, fill);
}

}  // namespace cuda_kernels
}  // namespace fp8_dummy
