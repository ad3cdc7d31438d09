// init_many_ on CUDA: the dense FP8 tensors of a call are filled by one launch per
// (device, dtype) of init_many_kernel.cuh's batched kernel, each tensor with the bytes its
// own init_(t, low, high, seed) gives (the work table: launch/cuda_batch_table.h). The rest
// (float16 and wider, layouts with gaps, tensors sharing bytes with another of the
// call, a dtype whose conversion probe found no match, any call inside graph capture)
// takes the per-tensor path, after the batches, in call order (common/init_many_plan.h).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <ATen/cuda/CUDAGraphsUtils.cuh>
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/init_many_plan.h"
#include "common/reference.h"
#include "cuda/init_cuda.h"
#include "cuda/init_many_kernel.cuh"
#include "launch/cuda_launch_plan.h"

namespace fp8_dummy {
namespace {

using cuda_kernels::BatchCall;
using cuda_kernels::BatchPiece;
using cuda_kernels::BatchTable;

// The table in one device buffer, the call's only allocation (O(number of tensors)):
// filled in pinned host memory and copied on the current stream. Both buffers come from
// torch's caching allocators, which reuse them only after that stream's work so far
// (our kernel included) is done, so they may be released when this returns.
at::Tensor device_table(const BatchTable& table, c10::Device device) {
  const auto bytes = static_cast<int64_t>(table.pieces.size() * sizeof(BatchPiece));
  auto host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.mutable_data_ptr(), table.pieces.data(), static_cast<size_t>(bytes));
  return host.to(device, /*non_blocking=*/true);
}

template <cuda::Fp8Format F>
void launch_many(const BatchTable& table, const BatchPiece* pieces, const BatchCall& call,
                 int64_t sm_count, cudaStream_t stream) {
  const int64_t resident =
      resident_blocks<cuda_kernels::init_many_fp8_kernel<F>>(sm_count, cuda_kernels::kTile);
  const auto blocks = static_cast<unsigned>(std::min(table.tiles, resident));
  cuda_kernels::init_many_fp8_kernel<F><<<blocks, cuda_kernels::kTile, 0, stream>>>(
      pieces, static_cast<int64_t>(table.pieces.size()), table.tiles, call);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// One batched launch for `group` (indices of dense FP8 tensors of one device and dtype).
void launch_group(at::TensorList tensors, const std::vector<size_t>& group,
                  const Fp8Conversion& conversion, double low, double high, int64_t seed) {
  const at::Tensor& first = tensors[group[0]];
  // uniform_ sizes its grid from the tensor's device, as the per-tensor path does.
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(first.device().index());
  std::vector<cuda_kernels::BatchTensor> inputs;
  inputs.reserve(group.size());
  for (const size_t i : group) {
    inputs.push_back({static_cast<uint8_t*>(tensors[i].data_ptr()), tensors[i].numel()});
  }
  const BatchTable table = cuda_kernels::build_batch_table(inputs, props->multiProcessorCount,
                                                           props->maxThreadsPerMultiProcessor);
  const cuda::Fp8Format format = fp8_format(first.scalar_type());
  BatchCall call{};
  call.seed = static_cast<uint64_t>(seed);  // torch.Generator().manual_seed(seed)
  call.uniform = cuda::make_uniform_params(low, high);
  call.overflow = conversion.mode;
  call.use_hw = use_hw_conversion(conversion, format, call.uniform);
  const at::Tensor buffer = device_table(table, first.device());
  const auto* pieces = static_cast<const BatchPiece*>(buffer.const_data_ptr());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  with_fp8_format(format, [&](auto f) {
    launch_many<decltype(f)::value>(table, pieces, call, props->multiProcessorCount, stream);
  });
}

void init_many_cuda(at::TensorList tensors, double low, double high, int64_t seed) {
  check_init_many_args(tensors, low, high);
  BatchPlan plan;
  if (at::cuda::currentStreamCaptureStatus() == at::cuda::CaptureStatus::None) {
    plan = plan_batches(tensors, c10::DeviceType::CUDA);
  } else {
    // A captured batch would replay a copy from host memory freed after the call; the
    // per-tensor kernel is capture-safe.
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].numel() > 0) plan.singles.push_back(i);
    }
  }
  for (const auto& group : plan.groups) {
    const c10::cuda::CUDAGuard guard(tensors[group[0]].device());
    if (const auto conversion = fp8_conversion(tensors[group[0]])) {
      launch_group(tensors, group, *conversion, low, high, seed);
    } else {  // the per-tensor path takes the exact reference path for these
      plan.singles.insert(plan.singles.end(), group.begin(), group.end());
    }
  }
  std::sort(plan.singles.begin(), plan.singles.end());  // call order
  for (const size_t i : plan.singles) init_one(tensors[i], low, high, seed);
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CUDA, m) { m.impl("init_many_", TORCH_FN(init_many_cuda)); }

}  // namespace fp8_dummy
