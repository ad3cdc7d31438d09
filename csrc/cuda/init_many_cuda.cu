// init_many_ on CUDA: one batched launch per (device, 1-byte dtype) for the dense tensors; the
// rest (wider dtypes, gaps, shared bytes, graph capture) per tensor after them, in order.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <ATen/cuda/CUDAGraphsUtils.cuh>
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/init_many_plan.h"
#include "common/proof.h"
#include "common/reference.h"
#include "cuda/init_cuda.h"
#include "cuda/init_many_kernel.cuh"
#include "cuda_plan/cuda_launch_plan.h"
#include "cuda_plan/cuda_proof.h"

namespace fp8_dummy {
namespace {

using cuda_kernels::BatchCall;
using cuda_kernels::BatchPiece;
using cuda_kernels::BatchTable;

// The table in one device buffer, the call's only allocation, copied from pinned memory on
// the current stream (both reused only after that stream's work).
at::Tensor device_table(const BatchTable& table, c10::Device device) {
  const auto bytes = static_cast<int64_t>(table.pieces.size() * sizeof(BatchPiece));
  auto host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.mutable_data_ptr(), table.pieces.data(), static_cast<size_t>(bytes));
  return host.to(device, /*non_blocking=*/true);
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
  // The round keys of torch.Generator().manual_seed(seed), made once here.
  call.keys = cuda::philox_keys(static_cast<uint64_t>(seed));
  call.uniform = cuda::make_uniform_params(low, high);
  call.overflow = conversion.mode;
  call.use_hw = use_hw_conversion(conversion, format, call.uniform);
  const at::Tensor buffer = device_table(table, first.device());
  const auto* pieces = static_cast<const BatchPiece*>(buffer.const_data_ptr());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  with_fp8_format(format, [&](auto f) {
    launch_resident<cuda_kernels::init_many_fp8_kernel<decltype(f)::value>>(
        table.tiles, cuda_kernels::kTile, props->multiProcessorCount, stream, pieces,
        static_cast<int64_t>(table.pieces.size()), table.tiles, call);
  });
}

// launch_group plus FP8_DUMMY_FAULT=cuda.init_many_: what a call runs.
void run_group(at::TensorList tensors, const std::vector<size_t>& group,
               const Fp8Conversion& conversion, double low, double high, int64_t seed) {
  launch_group(tensors, group, conversion, low, high, seed);
  if (proof::fault("cuda.init_many_")) proof::corrupt(tensors[group[0]]);
}

// Whether the batched kernel is proven for this group's key (cuda_plan/cuda_proof.h).
bool group_proven(const at::Tensor& first, const Fp8Conversion& conversion, double low, double high,
                  int64_t seed, bool contiguous_temp) {
  const std::string key =
      cuda_proof::many_key(device_description(first.device()), first.scalar_type(),
                           use_hw_conversion(conversion, fp8_format(first.scalar_type()),
                                             cuda::make_uniform_params(low, high)),
                           overflow_name(conversion.mode), contiguous_temp);
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(first.device().index());
  const auto sizes =
      cuda_proof::many_probe_numels(props->multiProcessorCount, props->maxThreadsPerMultiProcessor);
  auto ours = [&](std::vector<at::Tensor>& ts) {
    std::vector<size_t> all(ts.size());
    for (size_t i = 0; i < ts.size(); ++i) all[i] = i;
    run_group(ts, all, conversion, low, high, seed);
  };
  auto ref = [&](at::Tensor& t, uint64_t s, uint64_t) -> uint64_t {
    auto g = at::make_generator<at::CUDAGeneratorImpl>(t.device().index());
    g.set_current_seed(s);  // torch.Generator(device).manual_seed(seed): offset 0
    reference_path(t, low, high, g, contiguous_temp);
    return g.get_offset();
  };
  return proof::proven(key, [&] {
    auto verdict =
        cuda_proof::many_probe(first.options(), sizes, static_cast<uint64_t>(seed), ours, ref);
    C10_CUDA_CHECK(cudaStreamSynchronize(at::cuda::getCurrentCUDAStream()));
    return verdict;
  });
}

void init_many_cuda(at::TensorList tensors, double low, double high, int64_t seed,
                    bool contiguous_temp) {
  check_init_many_args(tensors, low, high);
  BatchPlan plan;
  if (at::cuda::currentStreamCaptureStatus() == at::cuda::CaptureStatus::None) {
    plan = plan_batches(tensors, c10::DeviceType::CUDA, contiguous_temp);
  } else {
    // A captured batch would replay a copy from freed host memory: per tensor instead.
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].numel() > 0) plan.singles.push_back(i);
    }
  }
  for (const auto& group : plan.groups) {
    const c10::cuda::CUDAGuard guard(tensors[group[0]].device());
    const auto conversion = fp8_conversion(tensors[group[0]]);
    // The per-tensor kernel's key too: a captured init_many_'s path, and this call's fallback.
    for (const size_t i : group) fused_kernel_proven(tensors[i], low, high, false, contiguous_temp);
    if (conversion &&
        group_proven(tensors[group[0]], *conversion, low, high, seed, contiguous_temp)) {
      run_group(tensors, group, *conversion, low, high, seed);
    } else {  // the per-tensor path (its own proof, else the reference) takes these
      plan.singles.insert(plan.singles.end(), group.begin(), group.end());
    }
  }
  std::sort(plan.singles.begin(), plan.singles.end());  // call order
  for (const size_t i : plan.singles) init_one(tensors[i], low, high, seed, contiguous_temp);
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CUDA, m) { m.impl("init_many_", TORCH_FN(init_many_cuda)); }

}  // namespace fp8_dummy
