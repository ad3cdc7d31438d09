// init_ on CUDA: 1-byte tensors by the fused kernel launched as torch launches uniform_ on the
// float16 temp, behind its proof (cuda_plan/cuda_proof.h); wider dtypes: the reference itself.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
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
#include "cuda_plan/cuda_launch_plan.h"
#include "cuda_plan/cuda_proof.h"

namespace fp8_dummy {
namespace {

using cuda_kernels::PieceArgs;

// Each launch's Philox state: the caller's generator (locked), or a fresh one's offsets.
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

// The generator the reference path needs: the caller's, or a fresh one as vLLM makes.
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

PieceArgs piece_args(const at::Tensor& self, double low, double high,
                     const Fp8Conversion& conversion, const cuda::StridedLayout& layout) {
  PieceArgs args{};
  args.item.data = static_cast<uint8_t*>(self.mutable_data_ptr());
  args.item.uniform = cuda::make_uniform_params(low, high);
  args.item.overflow = conversion.mode;
  args.item.use_hw =
      use_hw_conversion(conversion, fp8_format(self.scalar_type()), args.item.uniform);
  args.item.layout = layout;
  return args;
}

// One reference launch's piece: elements [start, start + count) of the temp's order.
void launch_piece(const at::Tensor& self, PieceArgs args, int64_t start, int64_t count,
                  const cuda::ReferenceGrid& grid, const at::PhiloxCudaState& philox) {
  // uniform_ sizes its grid from the current device, which its device guard makes self's.
  const int64_t sm_count =
      at::cuda::getDeviceProperties(self.device().index())->multiProcessorCount;
  const bool linear = args.item.layout.linear();
  args.item.count = count;
  args.item.threads = grid.threads;
  const auto address = reinterpret_cast<uintptr_t>(args.item.data + start);
  args.item.aligned = linear && address % 4 == 0;
  args.item.wide_count = linear && address % 16 == 0 ? static_cast<uint32_t>(count) : 0;
  if (linear) {  // the linear kernel takes the piece's first byte as data (its start is 0)
    args.item.data += start;
  } else {
    args.item.start = start;
  }
  args.steps = grid.steps;
  args.philox = philox;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t items =
      cuda_kernels::work_items(args.item.threads, args.steps, cuda_kernels::item_group(linear));
  const int64_t wanted = (items + cuda_kernels::kBlock - 1) / cuda_kernels::kBlock;
  with_fp8_format(fp8_format(self.scalar_type()), [&](auto f) {
    constexpr auto F = decltype(f)::value;
    auto* run = linear ? &launch_resident<cuda_kernels::init_fp8_kernel<F, true>, PieceArgs>
                       : &launch_resident<cuda_kernels::init_fp8_kernel<F, false>, PieceArgs>;
    run(wanted, cuda_kernels::kBlock, sm_count, stream, args);
  });
  // The linear kernel's checked stores alone (a piece not 16-byte aligned), faulted where the
  // branch is chosen: every call and probe that runs it, split or not.
  if (linear && args.item.wide_count == 0 && proof::fault("cuda.init_:checked-stores")) {
    proof::corrupt(self, start);  // linear items are 1-byte elements: start is a byte count
  }
}

// The fused kernel on self, as the reference launches uniform_ on its float16 temp.
void run_fused(const at::Tensor& self, double low, double high, PhiloxSource& source,
               const Fp8Conversion& conversion, const cuda::StridedLayout& layout) {
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(self.device().index());
  const PieceArgs args = piece_args(self, low, high, conversion, layout);
  cuda::reference_launches(self.numel(), props->multiProcessorCount,
                           props->maxThreadsPerMultiProcessor, source,
                           [&](int64_t start, int64_t count, const cuda::ReferenceGrid& grid,
                               const at::PhiloxCudaState& philox) {
                             launch_piece(self, args, start, count, grid, philox);
                           });
  if (proof::fault("cuda.init_")) proof::corrupt(self);
}

// Whether the fused kernel is proven for self's key (no probe inside graph capture).
bool fused_proven(const at::Tensor& self, double low, double high, const Fp8Conversion& conversion,
                  bool generator_form, bool contiguous_temp, bool linear) {
  const auto dtype = self.scalar_type();
  const bool split = self.numel() > cuda::kMax32BitHalfElements;
  const auto layout = cuda_proof::layout_kind(self, linear, contiguous_temp);
  const std::string key = cuda_proof::init_key(
      device_description(self.device()), dtype,
      use_hw_conversion(conversion, fp8_format(dtype), cuda::make_uniform_params(low, high)),
      overflow_name(conversion.mode), layout, split, generator_form, contiguous_temp);
  if (at::cuda::currentStreamCaptureStatus() != at::cuda::CaptureStatus::None) {
    return proof::lookup(key) == proof::State::kProven;
  }
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(self.device().index());
  const int64_t sm_count = props->multiProcessorCount, per_sm = props->maxThreadsPerMultiProcessor;
  auto generator = [&](uint64_t seed, uint64_t offset) {
    auto g = at::make_generator<at::CUDAGeneratorImpl>(self.device().index());
    g.set_current_seed(seed);
    g.set_offset(offset);
    return g;
  };
  auto ours = [&](at::Tensor& t, uint64_t seed, uint64_t offset) -> uint64_t {
    PhiloxSource source;
    source.seed = seed;
    source.fresh.next = offset;
    if (generator_form) source.generator = generator(seed, offset);
    run_fused(t, low, high, source, conversion, *to_layout(memory_order(t, contiguous_temp)));
    return generator_form ? source.generator->get_offset() : source.fresh.next;
  };
  auto piece = [&](at::Tensor& t, int64_t start, int64_t count, uint64_t seed,
                   uint64_t offset) -> uint64_t {
    const auto args =
        piece_args(t, low, high, conversion, *to_layout(memory_order(t, contiguous_temp)));
    const cuda::ReferenceGrid grid = cuda::reference_grid(count, sm_count, per_sm);
    launch_piece(t, args, start, count, grid, at::PhiloxCudaState(seed, offset));
    if (start == 0 && proof::fault("cuda.init_")) proof::corrupt(t);  // once per probe
    return offset + grid.counter_offset;
  };
  auto ref = [&](at::Tensor& t, uint64_t seed, uint64_t offset) -> uint64_t {
    auto g = generator(seed, offset);
    reference_path(t, low, high, g, contiguous_temp);
    return g.get_offset();
  };
  return proof::proven(key, [&] {
    const int64_t n = cuda_proof::probe_piece(sm_count, per_sm);
    auto verdict =
        split ? cuda_proof::split_probe(self.options(), n, layout, piece, ref)
              : cuda_proof::init_probe(self.options(), n, layout, generator_form, ours, ref);
    C10_CUDA_CHECK(cudaStreamSynchronize(at::cuda::getCurrentCUDAStream()));
    return verdict;
  });
}

// The conversion and layout of the fused kernel where it is proven for self's key.
std::optional<std::pair<Fp8Conversion, cuda::StridedLayout>> proven_plan(const at::Tensor& self,
                                                                         double low, double high,
                                                                         bool generator_form,
                                                                         bool contiguous_temp) {
  const auto conversion = fp8_conversion(self);
  const MemoryOrder order = memory_order(self, contiguous_temp);
  const auto layout = to_layout(order);
  if (!conversion || !layout ||
      !fused_proven(self, low, high, *conversion, generator_form, contiguous_temp, order.linear()))
    return std::nullopt;
  return std::make_pair(*conversion, *layout);
}

}  // namespace

bool fused_kernel_proven(const at::Tensor& self, double low, double high, bool generator_form,
                         bool contiguous_temp) {
  return proven_plan(self, low, high, generator_form, contiguous_temp).has_value();
}

namespace {

void fill(const at::Tensor& self, double low, double high, PhiloxSource source,
          bool contiguous_temp) {
  if (!uses_half_temp(self.scalar_type())) {  // float16 and wider: the reference itself
    at::Tensor(self).uniform_(low, high, reference_generator(self, source));
    return;
  }
  const bool given = source.generator.has_value();
  if (const auto plan = proven_plan(self, low, high, given, contiguous_temp)) {
    return run_fused(self, low, high, source, plan->first, plan->second);
  }
  // Else the reference: too many dimensions, no matching conversion, a key not proven.
  reference_path(self, low, high, reference_generator(self, source), contiguous_temp);
}

void init_seed_cuda(at::Tensor& self, double low, double high, int64_t seed, bool contiguous_temp) {
  check_init_args(self, low, high);
  if (self.numel() == 0) return;  // the reference draws nothing either
  const c10::cuda::CUDAGuard guard(self.device());
  PhiloxSource source;
  source.seed = static_cast<uint64_t>(seed);
  fill(self, low, high, std::move(source), contiguous_temp);
}

void init_generator_cuda(at::Tensor& self, double low, double high,
                         std::optional<at::Generator> gen, bool contiguous_temp) {
  check_init_args(self, low, high);
  PhiloxSource source;
  source.generator = generator_for(self, gen, "init_");
  if (self.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(self.device());
  fill(self, low, high, std::move(source), contiguous_temp);
}

}  // namespace

const std::string& device_description(const c10::Device& device) {
  static std::mutex mutex;
  static std::map<int, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto& text = known[device.index()];
  if (text.empty()) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(device.index());
    text = device.str() + " (" + p->name + ", " + std::to_string(p->multiProcessorCount) + " SMs)";
  }
  return text;
}

TORCH_LIBRARY_IMPL(fp8_dummy, CUDA, m) {
  m.impl("init_", TORCH_FN(init_seed_cuda));
  m.impl("init_.generator", TORCH_FN(init_generator_cuda));
}

}  // namespace fp8_dummy
