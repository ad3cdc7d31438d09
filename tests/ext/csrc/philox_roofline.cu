// The benchmark's Philox roofline (benchmarks/bench_cuda.py): init_'s launch shape and
// Philox calls on `numel` elements, no stores but one folded word per thread.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "cuda/init_cuda.h"
#include "cuda/init_kernel.cuh"

namespace fp8_dummy {
namespace cuda_kernels {

// The benchmark's roofline: the linear kernel's Philox calls (its work items of kLinearGroup
// subsequences, philox_words_run), folded into one word per thread.
__global__ void __launch_bounds__(kBlock)
    philox_roofline_kernel(int32_t* out, int64_t threads, int64_t steps, uint64_t seed) {
  uint32_t fold = 0;
  const auto last = static_cast<uint32_t>(steps);
  const cuda::PhiloxKeys keys = cuda::philox_keys(seed);
  for (WorkWalk walk(static_cast<uint32_t>(threads / kLinearGroup),
                     blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
       walk.step < last; walk.next()) {
    __builtin_assume(walk.group < (1u << 28));
    cuda::Words4 words[kLinearGroup];
    cuda::philox_words_run<kLinearGroup>(keys, walk.group * kLinearGroup, 0, walk.step, words);
#pragma unroll
    for (int q = 0; q < kLinearGroup; ++q) {
      fold ^= words[q].w[0] ^ words[q].w[1] ^ words[q].w[2] ^ words[q].w[3];
    }
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<int32_t>(fold);
}

}  // namespace cuda_kernels

namespace {

// Launch shape of init_ on `numel` (<= 2^30) elements: the same kernel grid and work
// items. Returns the number of threads (= out elements needed); launches only when
// `out` is large enough.
int64_t philox_roofline(at::Tensor& out, int64_t numel, int64_t seed) {
  TORCH_CHECK(out.is_cuda() && out.scalar_type() == at::kInt && out.is_contiguous(),
              "fp8_dummy_test.philox_roofline: expects a contiguous int32 CUDA tensor");
  TORCH_CHECK(numel > 0 && numel <= cuda::kMax32BitHalfElements,
              "fp8_dummy_test.philox_roofline: numel must be in [1, 2^30]");
  const c10::cuda::CUDAGuard guard(out.device());
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(out.device().index());
  const cuda::ReferenceGrid grid =
      cuda::reference_grid(numel, props->multiProcessorCount, props->maxThreadsPerMultiProcessor);
  const int64_t items =
      cuda_kernels::work_items(grid.threads, grid.steps, cuda_kernels::kLinearGroup);
  const int64_t blocks =
      std::min((items + cuda_kernels::kBlock - 1) / cuda_kernels::kBlock,
               resident_blocks<cuda_kernels::philox_roofline_kernel>(props->multiProcessorCount));
  const int64_t threads = blocks * cuda_kernels::kBlock;
  if (out.numel() < threads) return threads;
  cuda_kernels::philox_roofline_kernel<<<static_cast<unsigned>(blocks), cuda_kernels::kBlock, 0,
                                         at::cuda::getCurrentCUDAStream()>>>(
      out.mutable_data_ptr<int32_t>(), grid.threads, grid.steps, static_cast<uint64_t>(seed));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return threads;
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_test, CUDA, m) {
  m.impl("philox_roofline", TORCH_FN(philox_roofline));
}

}  // namespace fp8_dummy
