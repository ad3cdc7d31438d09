// The CPU emulator of the batched CUDA kernel (init_many_): the kernel's own work table
// (cuda_plan/cuda_batch_table.h), tile lookup and per-item code (cuda_plan/cuda_work_item.h), run
// block by block and thread by thread on the CPU, so CPU-only CI tests the batching logic itself
// (every item once, each tensor's bytes those of its own init_) without a GPU.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "common/init_many_plan.h"
#include "common/reference.h"
#include "cuda_plan/cuda_batch_table.h"
#include "cuda_plan/cuda_launch_plan.h"

namespace fp8_dummy {
namespace {

using cuda_kernels::BatchCall;
using cuda_kernels::BatchPiece;
using cuda_kernels::BatchTable;

// The kernel's visit, plus a count of the visits of every work item of every piece.
template <cuda::Fp8Format F>
struct CountingFill {
  cuda_kernels::FillDense<F> fill;
  const BatchPiece* pieces;
  std::vector<std::vector<uint8_t>>* seen;

  void operator()(const BatchPiece& p, int64_t idx, uint32_t step) {
    const int64_t item = static_cast<int64_t>(step) * (p.threads / cuda_kernels::kGroup) +
                         idx / cuda_kernels::kGroup;
    auto& count = (*seen)[&p - pieces][item];
    TORCH_CHECK(count == 0, "fp8_dummy_test.emulate_cuda_init_many_: work item ", item,
                " of piece ", &p - pieces, " visited twice");
    count = 1;
    fill(p, idx, step);
  }
};

// One launch of `blocks` blocks of kTile threads, simulated in block order.
template <cuda::Fp8Format F>
void emulate_launch(const BatchTable& table, const BatchCall& call, int64_t blocks) {
  std::vector<std::vector<uint8_t>> seen;
  for (const BatchPiece& p : table.pieces) {
    seen.emplace_back(cuda_kernels::work_items(p.threads, p.steps), 0);
  }
  CountingFill<F> visit{{call}, table.pieces.data(), &seen};
  const auto n = static_cast<int64_t>(table.pieces.size());
  for (int64_t b = 0; b < blocks; ++b) {
    for (uint32_t lane = 0; lane < cuda_kernels::kTile; ++lane) {
      cuda_kernels::for_each_batch_item(table.pieces.data(), n, table.tiles,
                                        static_cast<uint32_t>(b), static_cast<uint32_t>(blocks),
                                        lane, visit);
    }
  }
  for (size_t p = 0; p < seen.size(); ++p) {
    TORCH_CHECK(std::all_of(seen[p].begin(), seen[p].end(), [](uint8_t s) { return s == 1; }),
                "fp8_dummy_test.emulate_cuda_init_many_: a work item of piece ", p,
                " was not visited");
  }
}

int64_t emulate_cuda_init_many(at::TensorList tensors, double low, double high, int64_t seed,
                               int64_t sm_count, int64_t max_threads_per_sm, bool saturate_e4m3fn,
                               int64_t grid, bool contiguous_temp) {
  check_init_many_args(tensors, low, high);
  for (const auto& t : tensors) {
    TORCH_CHECK(t.device().is_cpu(), "fp8_dummy_test.emulate_cuda_init_many_: expects CPU tensors");
    TORCH_CHECK(uses_half_temp(t.scalar_type()) || t.scalar_type() == c10::ScalarType::Half,
                "fp8_dummy_test.emulate_cuda_init_many_: emulates 1-byte and float16 tensors, got ",
                t.scalar_type());
  }
  TORCH_CHECK(sm_count > 0 && max_threads_per_sm >= cuda::kBlockThreads && grid >= 0,
              "fp8_dummy_test.emulate_cuda_init_many_: bad device properties or grid");
  const BatchPlan plan = plan_batches(tensors, c10::DeviceType::CPU, contiguous_temp);
  BatchCall call{};
  call.keys = cuda::philox_keys(static_cast<uint64_t>(seed));
  call.uniform = cuda::make_uniform_params(low, high);
  call.use_hw = false;  // no hardware conversion on the host
  for (const auto& group : plan.groups) {
    call.overflow = emulated_overflow(fp8_format(tensors[group[0]].scalar_type()), saturate_e4m3fn);
    std::vector<cuda_kernels::BatchTensor> inputs;
    for (const size_t i : group) {
      inputs.push_back({static_cast<uint8_t*>(tensors[i].data_ptr()), tensors[i].numel()});
    }
    const BatchTable table = cuda_kernels::build_batch_table(inputs, sm_count, max_threads_per_sm);
    // The kernel's grid is one resident wave, at most; an SM holds 8 or more blocks.
    const int64_t blocks = grid > 0 ? grid : std::min(table.tiles, sm_count * 8);
    with_fp8_format(fp8_format(tensors[group[0]].scalar_type()), [&](auto format) {
      emulate_launch<decltype(format)::value>(table, call, blocks);
    });
  }
  static const auto single = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("fp8_dummy_test::emulate_cuda_init_", "")
                                 .typed<int64_t(at::Tensor&, double, double, int64_t, int64_t,
                                                int64_t, int64_t, bool, bool)>();
  for (const size_t i : plan.singles) {
    at::Tensor t = tensors[i];
    single.call(t, low, high, seed, 0, sm_count, max_threads_per_sm, saturate_e4m3fn,
                contiguous_temp);
  }
  return static_cast<int64_t>(plan.groups.size());
}

std::vector<int64_t> cuda_batch_table(at::IntArrayRef numels, int64_t sm_count,
                                      int64_t max_threads_per_sm) {
  TORCH_CHECK(sm_count > 0 && max_threads_per_sm >= cuda::kBlockThreads,
              "fp8_dummy_test.cuda_batch_table: bad device properties");
  std::vector<cuda_kernels::BatchTensor> inputs;
  for (const int64_t n : numels) {
    TORCH_CHECK(n > 0, "fp8_dummy_test.cuda_batch_table: sizes must be positive");
    inputs.push_back({nullptr, n});
  }
  const BatchTable table = cuda_kernels::build_batch_table(inputs, sm_count, max_threads_per_sm);
  std::vector<int64_t> flat{table.tiles};
  for (const BatchPiece& p : table.pieces) {
    flat.insert(flat.end(), {p.tensor, p.start, p.count, p.threads, p.steps,
                             static_cast<int64_t>(p.offset), p.tile_begin});
  }
  return flat;
}

std::vector<int64_t> cuda_batch_divide(at::IntArrayRef numerators, at::IntArrayRef divisors) {
  TORCH_CHECK(numerators.size() == divisors.size(),
              "fp8_dummy_test.cuda_batch_divide: as many numerators as divisors");
  std::vector<int64_t> out;
  for (size_t i = 0; i < numerators.size(); ++i) {
    const int64_t n = numerators[i], d = divisors[i];
    TORCH_CHECK(n >= 0 && n < (int64_t{1} << 28) && d >= 64 && d < (int64_t{1} << 28),
                "fp8_dummy_test.cuda_batch_divide: outside the divider's range");
    const cuda_kernels::Divider div = cuda_kernels::make_divider(static_cast<uint32_t>(d));
    out.push_back(cuda_kernels::divide(static_cast<uint32_t>(n), div.m, div.shift));
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_test, CompositeImplicitAutograd, m) {
  m.impl("cuda_batch_table", TORCH_FN(cuda_batch_table));
  m.impl("cuda_batch_divide", TORCH_FN(cuda_batch_divide));
}

TORCH_LIBRARY_IMPL(fp8_dummy_test, CPU, m) {
  m.impl("emulate_cuda_init_many_", TORCH_FN(emulate_cuda_init_many));
}

}  // namespace fp8_dummy
