// init_stateless_ on CUDA: the CPU kernel's per-element rule and (FP8) its table from torch's
// CPU copy_, so both write the same bytes; nothing allocated or synchronized (capture-safe).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <ATen/cuda/CUDAGraphsUtils.cuh>
#include <algorithm>
#include <atomic>

#include "common/proof.h"
#include "common/reference.h"
#include "common/stateless_plan.h"
#include "cuda/init_cuda.h"
#include "cuda/stateless_kernel.cuh"
#include "cuda_plan/cuda_proof.h"

namespace fp8_dummy {
namespace {

namespace sk = stateless_kernels;

template <typename Out>
void launch(const sk::Args& args, bool linear, int64_t work, int64_t sm_count,
            cudaStream_t stream) {
  auto* run = linear ? &launch_resident<sk::linear_kernel<Out>, sk::Args>
                     : &launch_resident<sk::general_kernel<Out>, sk::Args>;
  run((work + sk::kBlock - 1) / sk::kBlock, sk::kBlock, sm_count, stream, args);
}

// The linear kernel: self dense and its global indices consecutive.
bool linear_geometry(const ShardGeometry& g) {
  return g.sizes.size() <= 1 &&
         (g.sizes.empty() || (g.self_strides[0] == 1 && g.global_strides[0] == 1));
}

// The kernels on self (numel > 0, at most kMaxDims merged dimensions).
void run_stateless(const at::Tensor& self, double low, double high, int64_t seed,
                   int64_t key_offset, const ShardGeometry& g) {
  const auto dtype = self.scalar_type();

  sk::Args args{};
  args.data = self.mutable_data_ptr();
  args.numel = self.numel();
  const auto useed = static_cast<uint64_t>(seed);
  args.keys = cuda::philox_keys(static_cast<uint32_t>(useed), static_cast<uint32_t>(useed >> 32));
  args.key_offset = static_cast<uint64_t>(key_offset);
  args.params = stateless_params(dtype, low, high);
  args.element_offset = g.element_offset;
  if (g.sizes.empty()) {  // one element: a row of one
    args.ndim = 1;
    args.sizes[0] = 1;
    args.self_strides[0] = 1;
    args.global_strides[0] = 1;
  } else {
    args.ndim = static_cast<int>(g.sizes.size());
    for (int d = 0; d < args.ndim; ++d) {
      args.sizes[d] = g.sizes[d];
      args.self_strides[d] = g.self_strides[d];
      args.global_strides[d] = g.global_strides[d];
    }
  }
  const bool linear = linear_geometry(g);
  int64_t work;  // threads' worth of items
  if (linear) {
    work = args.numel / (sk::kUnitCalls * 2) + 2;  // units (float64: 8 elements, else 16)
  } else {
    const int64_t len = args.sizes[args.ndim - 1];
    work = args.numel / len * (args.global_strides[args.ndim - 1] == 1 ? len / 2 + 2 : len);
  }
  if (is_fp8(dtype)) {
    const auto table = stateless_fp8_table(dtype, args.params);
    std::copy(table.begin(), table.end(), args.table);
  }
  const int64_t sm_count =
      at::cuda::getDeviceProperties(self.device().index())->multiProcessorCount;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  switch (dtype) {
    case c10::ScalarType::Half:
      return launch<sk::HalfOut>(args, linear, work, sm_count, stream);
    case c10::ScalarType::BFloat16:
      return launch<sk::Bf16Out>(args, linear, work, sm_count, stream);
    case c10::ScalarType::Float:
      return launch<sk::FloatOut>(args, linear, work, sm_count, stream);
    case c10::ScalarType::Double:
      return launch<sk::DoubleOut>(args, linear, work, sm_count, stream);
    case c10::ScalarType::Char:
    case c10::ScalarType::Byte:
      return launch<sk::ByteOut>(args, linear, work, sm_count, stream);
    default:
      return launch<sk::Fp8Out>(args, linear, work, sm_count, stream);
  }
}

// run_stateless plus FP8_DUMMY_FAULT=cuda.init_stateless_.
void run_with_fault(const at::Tensor& self, double low, double high, int64_t seed,
                    int64_t key_offset, const ShardGeometry& g) {
  run_stateless(self, low, high, seed, key_offset, g);
  if (proof::fault("cuda.init_stateless_")) proof::corrupt(self);
}

// Whether the kernel is proven for self's key against the CPU kernel (none in graph capture).
bool stateless_proven(const at::Tensor& self, double low, double high, int64_t seed,
                      int64_t key_offset, bool linear) {
  const std::string key =
      cuda_proof::stateless_key(device_description(self.device()), self.scalar_type(), linear);
  if (at::cuda::currentStreamCaptureStatus() != at::cuda::CaptureStatus::None) {
    return proof::lookup(key) == proof::State::kProven;
  }
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(self.device().index());
  const int64_t n =
      cuda_proof::probe_piece(props->multiProcessorCount, props->maxThreadsPerMultiProcessor);
  const std::function<proof::Verdict()> probe = [&] {
    return cuda_proof::stateless_probe(
        self.options(), n, linear,
        [&](at::Tensor& t, int64_t offset) {
          run_with_fault(t, low, high, seed, key_offset,
                         check_stateless_args(t, low, high, offset, std::nullopt));
        },
        [&](at::Tensor& t, int64_t offset) {
          stateless_on_cpu(t, low, high, seed, key_offset, offset, std::nullopt);
        });
  };
  return proof::proven(key, probe);
}

void init_stateless_cuda(at::Tensor& self, double low, double high, int64_t seed,
                         int64_t key_offset, int64_t element_offset,
                         at::OptionalIntArrayRef element_strides) {
  const ShardGeometry g = check_stateless_args(self, low, high, element_offset, element_strides);
  if (self.numel() == 0) return;
  TORCH_CHECK(g.sizes.size() <= static_cast<size_t>(sk::kMaxDims),
              "fp8_dummy.init_stateless_: CUDA tensors with more than ", sk::kMaxDims,
              " dimensions that cannot be merged are not supported (got ", g.sizes.size(), ")");
  const c10::cuda::CUDAGuard guard(self.device());
  if (stateless_proven(self, low, high, seed, key_offset, linear_geometry(g))) {
    run_with_fault(self, low, high, seed, key_offset, g);
    return;
  }
  TORCH_CHECK(at::cuda::currentStreamCaptureStatus() == at::cuda::CaptureStatus::None,
              "fp8_dummy.init_stateless_: the CUDA kernel for ", self.scalar_type(), " on ",
              self.device(), " (", linear_geometry(g) ? "linear" : "general",
              " layout) has not proven itself in this process, which cannot happen inside CUDA "
              "graph capture: call init_stateless_ on such a tensor once outside capture (its "
              "one-time proof, fp8_dummy.self_check_report())");
  // The reference of this mode: the CPU kernel's bytes, copied over.
  auto cpu = at::empty_like(self, self.options().device(at::kCPU));
  stateless_on_cpu(cpu, low, high, seed, key_offset, element_offset, element_strides);
  self.copy_(cpu);
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CUDA, m) { m.impl("init_stateless_", TORCH_FN(init_stateless_cuda)); }

}  // namespace fp8_dummy
