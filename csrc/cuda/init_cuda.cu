// CUDA kernels of fp8_dummy.init_ (both overloads), behind their proof (launch/cuda_proof.h).
// 1-byte tensors (FP8, int8, uint8): the fused kernel of init_kernel.cuh, launched exactly as
// torch launches uniform_ on the float16 temp (grid from the device's properties, the
// generator's Philox state taken under its lock, the split of more than 2^30 elements), so
// the bytes and the generator's state afterwards are the reference's; the temp's element
// order is empty_like's, or with contiguous_temp torch.empty(shape)'s (row-major).
// float16 and wider: the reference itself, self.uniform_.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <ATen/cuda/CUDAGraphsUtils.cuh>
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "common/proof.h"
#include "common/reference.h"
#include "cuda/init_cuda.h"
#include "cuda/init_kernel.cuh"
#include "launch/cuda_launch_plan.h"
#include "launch/cuda_proof.h"

namespace fp8_dummy {
namespace {

using cuda_kernels::PieceArgs;

// Our hardware conversion's table for self's device (formats without one: none).
std::optional<at::Tensor> hw_table(const at::Tensor& self, cuda::Fp8Format format) {
  auto out = at::empty({65536}, self.options().dtype(at::kByte));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (format == cuda::Fp8Format::kE4m3fn) {
    cuda_kernels::hw_table_kernel<cuda::Fp8Format::kE4m3fn>
        <<<128, 256, 0, stream>>>(out.mutable_data_ptr<uint8_t>());
  } else if (format == cuda::Fp8Format::kE5m2) {
    cuda_kernels::hw_table_kernel<cuda::Fp8Format::kE5m2>
        <<<128, 256, 0, stream>>>(out.mutable_data_ptr<uint8_t>());
  } else {
    return std::nullopt;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out.to(at::kCPU);
}

template <auto kKernel>
void launch(const PieceArgs& args, int64_t sm_count, cudaStream_t stream) {
  const int64_t items = cuda_kernels::work_items(args.item.threads, args.steps);
  const int64_t wanted = (items + cuda_kernels::kBlock - 1) / cuda_kernels::kBlock;
  const auto blocks = static_cast<unsigned>(std::min(wanted, resident_blocks<kKernel>(sm_count)));
  kKernel<<<blocks, cuda_kernels::kBlock, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <cuda::Fp8Format F>
void launch_piece(const PieceArgs& args, bool linear, int64_t sm_count, cudaStream_t stream) {
  if (linear) {
    launch<cuda_kernels::init_fp8_kernel<F, true>>(args, sm_count, stream);
  } else {
    launch<cuda_kernels::init_fp8_kernel<F, false>>(args, sm_count, stream);
  }
}

// Where the Philox state of each reference launch comes from: the caller's generator
// (reserved under its lock, capture-aware), or, for the seed form, the offsets a fresh
// generator seeded with `seed` would hand out (no generator object is made).
struct PhiloxSource {
  std::optional<at::Generator> generator;  // the caller's; none for the seed form
  uint64_t seed = 0;
  FreshOffsets fresh;

  at::PhiloxCudaState operator()(uint64_t increment) {
    if (!generator) return at::PhiloxCudaState(seed, fresh(increment));
    auto* impl = at::check_generator<at::CUDAGeneratorImpl>(*generator);
    // See Note [Acquire lock when using random generators]
    std::lock_guard<std::mutex> lock(impl->mutex_);
    return impl->philox_cuda_state(increment);
  }
};

// The generator the reference path itself needs (float16 and wider, and the FP8 cases the
// kernel does not cover): the caller's, or a fresh one for the seed form, as vLLM makes.
at::Generator reference_generator(const at::Tensor& self, const PhiloxSource& source) {
  if (source.generator) return *source.generator;
  TORCH_CHECK(at::cuda::currentStreamCaptureStatus() == at::cuda::CaptureStatus::None,
              "fp8_dummy.init_: this call (", self.scalar_type(), " on ", self.device(),
              ") needs torch's own uniform_ with a fresh generator, which cannot be created "
              "inside CUDA graph capture (the reference path fails there too). FP8 tensors "
              "are capture-safe once a call of the same kind (device, dtype, bounds, layout) "
              "ran outside capture (its one-time proof, fp8_dummy.self_check_report()); "
              "other dtypes: pass a generator.");
  auto gen = at::make_generator<at::CUDAGeneratorImpl>(self.device().index());
  gen.set_current_seed(source.seed);  // torch.Generator(device).manual_seed(seed): offset 0
  return gen;
}

// The fused kernel on self, as the reference launches uniform_ on its float16 temp.
void run_fused(const at::Tensor& self, double low, double high, PhiloxSource& source,
               const Fp8Conversion& conversion, const cuda::StridedLayout& layout) {
  // uniform_ sizes its grid from the current device, which its device guard makes
  // self's device, as ours does.
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(self.device().index());
  const int64_t sm_count = props->multiProcessorCount;
  const int64_t max_threads_per_sm = props->maxThreadsPerMultiProcessor;
  const cuda::Fp8Format format = fp8_format(self.scalar_type());

  PieceArgs args{};
  cuda_kernels::ItemArgs& item = args.item;
  item.data = static_cast<uint8_t*>(self.mutable_data_ptr());
  item.uniform = cuda::make_uniform_params(low, high);
  item.overflow = conversion.mode;
  item.use_hw = use_hw_conversion(conversion, format, item.uniform);
  item.layout = layout;
  const bool linear = layout.linear();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();

  cuda::reference_launches(self.numel(), sm_count, max_threads_per_sm, source,
                           [&](int64_t start, int64_t count, const cuda::ReferenceGrid& grid,
                               const at::PhiloxCudaState& philox) {
                             item.start = start;
                             item.count = count;
                             item.threads = grid.threads;
                             args.steps = grid.steps;
                             args.philox = philox;
                             item.aligned =
                                 linear && reinterpret_cast<uintptr_t>(item.data + start) % 4 == 0;
                             with_fp8_format(format, [&](auto f) {
                               launch_piece<decltype(f)::value>(args, linear, sm_count, stream);
                             });
                           });
  if (proof::fault("cuda.init_")) proof::corrupt(self);
}

// Whether the fused kernel is proven for self's key: the first time, a probe of the key's
// layout kind and size class filled by the kernel and by torch's reference (a scratch
// generator at the same state each), bytes and offsets compared. Inside graph capture no
// probe can run (it allocates and synchronizes): only a key proven before counts.
bool fused_proven(const at::Tensor& self, double low, double high, const Fp8Conversion& conversion,
                  bool generator_form, bool contiguous_temp, bool linear) {
  const auto format = fp8_format(self.scalar_type());
  const bool use_hw = use_hw_conversion(conversion, format, cuda::make_uniform_params(low, high));
  const bool split = self.numel() > cuda::kMax32BitHalfElements;
  const auto layout = cuda_proof::layout_kind(self, linear, contiguous_temp);
  auto key = [&] {
    return cuda_proof::init_key(device_description(self.device()), self.scalar_type(),
                                use_hw ? "hardware" : "software", overflow_name(conversion.mode),
                                layout, split, generator_form, contiguous_temp);
  };
  // The key's parts as a code for the memo (devices 0-15; others look the text up).
  static proof::Memo<16 * cuda::kNumFp8Formats * 2 * 3 * 4 * 2 * 2 * 2> memo;
  const int64_t device = self.device().index();
  size_t code = static_cast<size_t>(device) * cuda::kNumFp8Formats + static_cast<size_t>(format);
  code = (code * 2 + use_hw) * 3 + static_cast<size_t>(conversion.mode);
  code = ((code * 4 + static_cast<size_t>(layout)) * 2 + split) * 2 + generator_form;
  code = code * 2 + contiguous_temp;
  const bool memo_ok = device < 16;
  if (at::cuda::currentStreamCaptureStatus() != at::cuda::CaptureStatus::None) {
    return memo_ok ? memo.known_proven(code, key) : proof::lookup(key()) == 1;
  }
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(self.device().index());
  const int64_t n = split ? cuda::kMax32BitHalfElements + 4097
                          : cuda_proof::probe_numel(props->multiProcessorCount,
                                                    props->maxThreadsPerMultiProcessor);
  auto generator = [&](uint64_t seed, uint64_t offset) {
    auto g = at::make_generator<at::CUDAGeneratorImpl>(self.device().index());
    g.set_current_seed(seed);
    g.set_offset(offset);
    return g;
  };
  auto ours = [&](at::Tensor& t, uint64_t seed, uint64_t offset) -> uint64_t {
    PhiloxSource source;
    source.seed = seed;
    if (generator_form) source.generator = generator(seed, offset);
    const auto layout = to_layout(memory_order(t, contiguous_temp));
    run_fused(t, low, high, source, conversion, *layout);
    return generator_form ? source.generator->get_offset() : source.fresh.next;
  };
  auto ref = [&](at::Tensor& t, uint64_t seed, uint64_t offset) -> uint64_t {
    auto g = generator(seed, offset);
    reference_path(t, low, high, g, contiguous_temp);
    return g.get_offset();
  };
  auto probe = [&] {
    auto verdict = cuda_proof::init_probe(self.options(), n, layout, generator_form, ours, ref);
    C10_CUDA_CHECK(cudaStreamSynchronize(at::cuda::getCurrentCUDAStream()));
    return verdict;
  };
  return memo_ok ? memo.proven(code, key, probe) : proof::proven(key(), probe);
}

}  // namespace

bool fused_kernel_proven(const at::Tensor& self, double low, double high, bool generator_form,
                         bool contiguous_temp) {
  const auto conversion = fp8_conversion(self);
  const MemoryOrder order = memory_order(self, contiguous_temp);
  return conversion && to_layout(order) &&
         fused_proven(self, low, high, *conversion, generator_form, contiguous_temp,
                      order.linear());
}

namespace {

void fill_fp8(const at::Tensor& self, double low, double high, PhiloxSource source,
              bool contiguous_temp) {
  const auto conversion = fp8_conversion(self);
  const MemoryOrder order = memory_order(self, contiguous_temp);
  const auto layout = to_layout(order);
  if (!conversion || !layout ||
      !fused_proven(self, low, high, *conversion, source.generator.has_value(), contiguous_temp,
                    order.linear())) {
    // What the fused kernel does not cover (more than kMaxLayoutDims coalesced dimensions,
    // a conversion we cannot match, a key refused or not provable inside graph capture).
    reference_path(self, low, high, reference_generator(self, source), contiguous_temp);
    return;
  }
  run_fused(self, low, high, source, *conversion, *layout);
}

void fill(const at::Tensor& self, double low, double high, PhiloxSource source,
          bool contiguous_temp) {
  if (uses_half_temp(self.scalar_type())) {
    fill_fp8(self, low, high, std::move(source), contiguous_temp);
  } else {
    // float16 and wider: the reference itself.
    at::Tensor(self).uniform_(low, high, reference_generator(self, source));
  }
}

void init_seed_cuda(at::Tensor& self, double low, double high, int64_t seed, bool contiguous_temp) {
  check_init_args(self, low, high);
  if (self.numel() == 0) return;  // the reference draws nothing either
  const c10::cuda::CUDAGuard guard(self.device());
  // A fresh generator seeded with `seed` (as uint64) is at offset 0: its Philox states
  // are known without making one.
  PhiloxSource source;
  source.seed = static_cast<uint64_t>(seed);
  fill(self, low, high, std::move(source), contiguous_temp);
}

void init_generator_cuda(at::Tensor& self, double low, double high,
                         std::optional<at::Generator> gen, bool contiguous_temp) {
  check_init_args(self, low, high);
  const bool given = gen.has_value() && gen->defined();
  TORCH_CHECK(!given || gen->device().is_cuda(),
              "fp8_dummy.init_: expected a generator of device type 'cuda' for a CUDA tensor, "
              "got one of device '",
              given ? gen->device().str() : "", "'");
  if (self.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(self.device());
  PhiloxSource source;
  source.generator =
      given ? *gen : at::cuda::detail::getDefaultCUDAGenerator(self.device().index());
  fill(self, low, high, std::move(source), contiguous_temp);
}

}  // namespace

// Found once per (device, dtype) by converting all 65536 float16 bit patterns with
// torch itself and matching the result against our conversions (int8/uint8: wrap modulo
// 256 or saturation, whichever torch's CUDA conversion does there). Not probed inside
// graph capture (the probe synchronizes): nullopt then, and when nothing matches.
std::optional<Fp8Conversion> fp8_conversion(const at::Tensor& self) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::optional<Fp8Conversion>> cache;
  const std::pair<int, int> key{self.device().index(), static_cast<int>(self.scalar_type())};
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (at::cuda::currentStreamCaptureStatus() != at::cuda::CaptureStatus::None) {
    return std::nullopt;
  }
  const auto halves =
      at::arange(65536, at::TensorOptions().dtype(at::kInt)).to(at::kShort).view(at::kHalf);
  const auto table =
      halves.to(self.device()).to(self.scalar_type()).view(at::kByte).to(at::kCPU).contiguous();
  const uint8_t* torch_table = table.const_data_ptr<uint8_t>();
  std::optional<Fp8Conversion> found;
  if (const auto mode = pick_fp8_mode(self.scalar_type(), torch_table)) {
    const auto hw = hw_table(self, fp8_format(self.scalar_type()));
    found = Fp8Conversion{*mode, hw && hw_table_agrees(self.scalar_type(), *mode,
                                                       hw->const_data_ptr<uint8_t>(), torch_table)};
  }
  cache.emplace(key, found);
  // The search is reported with the proofs (the kernels' keys name what it found); finding
  // nothing sends this dtype to the reference, which warns once.
  proof::record(cuda_proof::key("cuda.copy_", device_description(self.device()),
                                {c10::toString(self.scalar_type())}),
                found.has_value(),
                !found      ? "none of our conversions gives torch's copy_ bytes"
                : found->hw ? "found; the hardware conversion agrees"
                            : "found; software conversion (the hardware one differs or is absent)");
  return found;
}

TORCH_LIBRARY_IMPL(fp8_dummy, CUDA, m) {
  m.impl("init_", TORCH_FN(init_seed_cuda));
  m.impl("init_.generator", TORCH_FN(init_generator_cuda));
}

}  // namespace fp8_dummy
