// The CUDA paths' proofs run on the CPU: our per-tensor kernel emulated work item by work
// item (the kernel's own fill_thread from cuda_plan/cuda_work_item.h, on a
// simulated grid), and emulate_proven_cuda_init_ / emulate_proven_cuda_init_many_, which put
// the emulated kernels through the very probe planning and verdicts the CUDA launchers use
// (cuda_plan/cuda_proof.h, common/proof.h) against the emulated reference
// (emulator/init_cuda_emulator.cpp). CPU tests thus show a broken kernel caught
// (FP8_DUMMY_FAULT=cuda.init_ or cuda.init_many_), the reference's bytes returned and the
// refusal reported, without a GPU.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "common/proof.h"
#include "common/reference.h"
#include "cuda_plan/cuda_launch_plan.h"
#include "cuda_plan/cuda_proof.h"
#include "cuda_plan/cuda_work_item.h"

namespace fp8_dummy {
namespace {

using cuda_kernels::ItemArgs;

// The reference emulation (emulate_cuda_init_, another file) through the dispatcher.
int64_t reference_emulation(at::Tensor& t, double low, double high, int64_t seed, int64_t offset,
                            int64_t sm_count, int64_t max_threads_per_sm, bool saturate,
                            bool contiguous_temp) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fp8_dummy_test::emulate_cuda_init_", "")
                             .typed<int64_t(at::Tensor&, double, double, int64_t, int64_t, int64_t,
                                            int64_t, bool, bool)>();
  return op.call(t, low, high, seed, offset, sm_count, max_threads_per_sm, saturate,
                 contiguous_temp);
}

int64_t many_emulation(std::vector<at::Tensor>& ts, double low, double high, int64_t seed,
                       int64_t sm_count, int64_t max_threads_per_sm, bool saturate,
                       bool contiguous_temp) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fp8_dummy_test::emulate_cuda_init_many_", "")
                             .typed<int64_t(at::TensorList, double, double, int64_t, int64_t,
                                            int64_t, bool, int64_t, bool)>();
  return op.call(ts, low, high, seed, sm_count, max_threads_per_sm, saturate, 0, contiguous_temp);
}

// The blocks of our per-tensor kernel's launch of `items` work items on `sm_count` SMs, as its
// launcher sizes it (one resident wave at most) at the blocks per SM its __launch_bounds__ ask
// for: the same constants (cuda_plan/cuda_work_item.h), so that the emulated grid-stride split
// is the launcher's wherever the occupancy API gives those blocks per SM.
int64_t wave_blocks(int64_t items, int64_t sm_count, bool linear) {
  const int64_t per_sm =
      linear ? cuda_kernels::kLinearBlocksPerSm : cuda_kernels::kStridedBlocksPerSm;
  return std::min<int64_t>((items + cuda_kernels::kBlock - 1) / cuda_kernels::kBlock,
                           sm_count * per_sm);
}

// One launch of our per-tensor kernel (cuda/init_kernel.cuh) on the CPU: elements [start,
// start + count) of the temp's order, the launch's work items visited by the simulated
// threads of a grid of `grid` blocks (0: the launcher's wave, wave_blocks), thread after
// thread, each through the kernel's fill_thread.
void emulate_launch(const at::Tensor& self, ItemArgs item, int64_t start, int64_t count,
                    const cuda::ReferenceGrid& g, uint64_t seed, uint64_t at, int64_t sm_count,
                    int64_t grid) {
  const bool linear = item.layout.linear();
  item.start = start;
  item.count = count;
  item.threads = g.threads;
  const auto address = reinterpret_cast<uintptr_t>(item.data + start);
  item.aligned = linear && address % 4 == 0;
  item.wide_count = linear && address % 16 == 0 ? static_cast<uint32_t>(count) : 0;
  const uint32_t items =
      cuda_kernels::work_items(g.threads, g.steps, cuda_kernels::item_group(linear));
  const int64_t blocks = grid > 0 ? grid : wave_blocks(items, sm_count, linear);
  const auto stride = static_cast<uint32_t>(blocks * cuda_kernels::kBlock);
  const cuda::PhiloxKeys keys = cuda::philox_keys(seed);
  with_fp8_format(fp8_format(self.scalar_type()), [&](auto f) {
    constexpr auto F = decltype(f)::value;
    for (uint32_t w = 0; w < stride; ++w) {
      if (linear) {
        cuda_kernels::fill_thread<F, true>(item, keys, at, static_cast<uint32_t>(g.steps), w,
                                           stride);
      } else {
        cuda_kernels::fill_thread<F, false>(item, keys, at, static_cast<uint32_t>(g.steps), w,
                                            stride);
      }
    }
  });
  // As the launcher: the linear kernel's checked stores faulted where that branch is chosen.
  if (linear && item.wide_count == 0 && proof::fault("cuda.init_:checked-stores")) {
    proof::corrupt(self, start);
  }
}

ItemArgs item_args(at::Tensor& self, double low, double high, bool saturate, bool contiguous_temp) {
  const auto layout = to_layout(memory_order(self, contiguous_temp));
  TORCH_CHECK(layout.has_value(),
              "fp8_dummy_test.emulate_cuda_kernel_init_: a layout the kernel leaves to the "
              "reference path");
  ItemArgs item{};
  item.data = static_cast<uint8_t*>(self.mutable_data_ptr());
  item.uniform = cuda::make_uniform_params(low, high);
  item.overflow = emulated_overflow(fp8_format(self.scalar_type()), saturate);
  item.use_hw = false;  // no hardware conversion on the host
  item.layout = *layout;
  return item;
}

// Our per-tensor kernel on the CPU, launch after launch as the reference launches.
int64_t emulate_kernel(at::Tensor& self, double low, double high, int64_t seed, int64_t offset,
                       int64_t sm_count, int64_t max_threads_per_sm, bool saturate, int64_t grid,
                       bool contiguous_temp) {
  check_init_args(self, low, high);
  TORCH_CHECK(self.device().is_cpu() && uses_half_temp(self.scalar_type()),
              "fp8_dummy_test.emulate_cuda_kernel_init_: expects a 1-byte (FP8, int8, uint8) "
              "CPU tensor");
  TORCH_CHECK(sm_count > 0 && max_threads_per_sm >= cuda::kBlockThreads && grid >= 0,
              "fp8_dummy_test.emulate_cuda_kernel_init_: bad device properties or grid");
  const ItemArgs item = item_args(self, low, high, saturate, contiguous_temp);
  if (self.numel() == 0) return offset;
  FreshOffsets offsets{static_cast<uint64_t>(offset)};
  cuda::reference_launches(
      self.numel(), sm_count, max_threads_per_sm, offsets,
      [&](int64_t start, int64_t count, const cuda::ReferenceGrid& g, uint64_t at) {
        emulate_launch(self, item, start, count, g, static_cast<uint64_t>(seed), at, sm_count,
                       grid);
      });
  return static_cast<int64_t>(offsets.next);
}

std::string emulated_device(int64_t sm_count, int64_t max_threads_per_sm) {
  return "emulated (" + std::to_string(sm_count) + " SMs x " + std::to_string(max_threads_per_sm) +
         " threads)";
}

// init_ as the CUDA launcher runs it, emulated: the kernel where its key is proven (the
// same key parts and probe as cuda/init_cuda.cu, the device emulated), else the reference.
int64_t emulate_proven_init(at::Tensor& self, double low, double high, int64_t seed, int64_t offset,
                            int64_t sm_count, int64_t max_threads_per_sm, bool saturate,
                            bool generator_form, bool contiguous_temp, bool split_probe) {
  check_init_args(self, low, high);
  if (self.numel() == 0) return offset;
  const auto layout =
      cuda_proof::layout_kind(self, memory_order(self, contiguous_temp).linear(), contiguous_temp);
  const bool split = split_probe || self.numel() > cuda::kMax32BitHalfElements;
  const auto mode = emulated_overflow(fp8_format(self.scalar_type()), saturate);
  const std::string key =
      cuda_proof::init_key(emulated_device(sm_count, max_threads_per_sm), self.scalar_type(), false,
                           overflow_name(mode), layout, split, generator_form, contiguous_temp);
  auto ours = [&](at::Tensor& t, uint64_t s, uint64_t o) -> uint64_t {
    const auto after =
        emulate_kernel(t, low, high, static_cast<int64_t>(s), static_cast<int64_t>(o), sm_count,
                       max_threads_per_sm, saturate, 0, contiguous_temp);
    if (proof::fault("cuda.init_")) proof::corrupt(t);
    return static_cast<uint64_t>(after);
  };
  auto piece = [&](at::Tensor& t, int64_t start, int64_t count, uint64_t s,
                   uint64_t o) -> uint64_t {
    const auto g = cuda::reference_grid(count, sm_count, max_threads_per_sm);
    emulate_launch(t, item_args(t, low, high, saturate, contiguous_temp), start, count, g, s, o,
                   sm_count, 0);
    if (start == 0 && proof::fault("cuda.init_")) proof::corrupt(t);
    return o + g.counter_offset;
  };
  auto ref = [&](at::Tensor& t, uint64_t s, uint64_t o) -> uint64_t {
    return static_cast<uint64_t>(
        reference_emulation(t, low, high, static_cast<int64_t>(s), static_cast<int64_t>(o),
                            sm_count, max_threads_per_sm, saturate, contiguous_temp));
  };
  const int64_t n = cuda_proof::probe_piece(sm_count, max_threads_per_sm);
  const bool use = proof::proven(key, [&] {
    return split ? cuda_proof::split_probe(self.options(), n, layout, piece, ref)
                 : cuda_proof::init_probe(self.options(), n, layout, generator_form, ours, ref);
  });
  return static_cast<int64_t>(use ? ours(self, seed, offset) : ref(self, seed, offset));
}

// init_many_ as the CUDA launcher runs it, emulated: per dtype of the list, the batched
// kernel where that key is proven, else each tensor's reference.
int64_t emulate_proven_many(at::TensorList tensors, double low, double high, int64_t seed,
                            int64_t sm_count, int64_t max_threads_per_sm, bool saturate,
                            bool contiguous_temp) {
  std::set<c10::ScalarType> dtypes;
  for (const auto& t : tensors) dtypes.insert(t.scalar_type());
  int64_t batched = 0;
  for (const auto dtype : dtypes) {
    std::vector<at::Tensor> group;
    for (const auto& t : tensors) {
      if (t.scalar_type() == dtype) group.push_back(t);
    }
    const auto mode = uses_half_temp(dtype) ? emulated_overflow(fp8_format(dtype), saturate)
                                            : cuda::E4m3fnOverflow::kSaturate;
    const std::string key =
        cuda_proof::many_key(emulated_device(sm_count, max_threads_per_sm), dtype, false,
                             overflow_name(mode), contiguous_temp);
    auto ours = [&](std::vector<at::Tensor>& ts) {
      const auto launches = many_emulation(ts, low, high, seed, sm_count, max_threads_per_sm,
                                           saturate, contiguous_temp);
      if (proof::fault("cuda.init_many_")) proof::corrupt(ts.front());
      return launches;
    };
    auto ref = [&](at::Tensor& t, uint64_t s, uint64_t o) -> uint64_t {
      return static_cast<uint64_t>(
          reference_emulation(t, low, high, static_cast<int64_t>(s), static_cast<int64_t>(o),
                              sm_count, max_threads_per_sm, saturate, contiguous_temp));
    };
    const auto sizes = cuda_proof::many_probe_numels(sm_count, max_threads_per_sm);
    const at::TensorOptions options = group.front().options();
    const bool use = proof::proven(key, [&] {
      return cuda_proof::many_probe(
          options, sizes, static_cast<uint64_t>(seed),
          [&](std::vector<at::Tensor>& ts) { ours(ts); }, ref);
    });
    if (use) {
      batched += ours(group);
    } else {
      for (auto& t : group) ref(t, static_cast<uint64_t>(seed), 0);
    }
  }
  return batched;
}

// Per reference launch of a call of `numel` elements, the blocks of the kernel's emulated grid
// by default (wave_blocks).
std::vector<int64_t> cuda_kernel_grid(int64_t numel, int64_t sm_count, int64_t max_threads_per_sm,
                                      bool linear) {
  TORCH_CHECK(numel > 0 && sm_count > 0 && max_threads_per_sm >= cuda::kBlockThreads,
              "fp8_dummy_test.cuda_kernel_grid: bad arguments");
  std::vector<int64_t> blocks;
  FreshOffsets offsets{0};
  cuda::reference_launches(
      numel, sm_count, max_threads_per_sm, offsets,
      [&](int64_t /*start*/, int64_t /*count*/, const cuda::ReferenceGrid& g, uint64_t /*at*/) {
        const uint32_t items =
            cuda_kernels::work_items(g.threads, g.steps, cuda_kernels::item_group(linear));
        blocks.push_back(wave_blocks(items, sm_count, linear));
      });
  return blocks;
}

// The probe of a call of `numel` elements, as init_cuda.cu sizes it: one piece, or two.
int64_t cuda_probe_numel(int64_t sm_count, int64_t max_threads_per_sm, int64_t numel) {
  const int64_t piece = cuda_proof::probe_piece(sm_count, max_threads_per_sm);
  return numel > cuda::kMax32BitHalfElements ? cuda_proof::split_start(piece) + piece : piece;
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_test, CPU, m) {
  m.impl("emulate_cuda_kernel_init_", TORCH_FN(emulate_kernel));
  m.impl("emulate_proven_cuda_init_", TORCH_FN(emulate_proven_init));
  m.impl("emulate_proven_cuda_init_many_", TORCH_FN(emulate_proven_many));
}

TORCH_LIBRARY_IMPL(fp8_dummy_test, CompositeExplicitAutograd, m) {
  m.impl("cuda_probe_numel", TORCH_FN(cuda_probe_numel));
  m.impl("cuda_kernel_grid", TORCH_FN(cuda_kernel_grid));
}

}  // namespace fp8_dummy
