// A CPU emulator of torch's CUDA reference path, built from the same torch-free
// headers (include/fp8_dummy/cuda/) and host decisions (cuda_plan/cuda_launch_plan.h) as our CUDA
// kernel: it computes on the CPU the bytes the reference would produce on a GPU with a
// given SM count and threads per SM. CPU-only CI checks it against an independent
// numpy model, GPU runs check it against the real reference. Test extension only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#include "common/reference.h"
#include "cuda_plan/cuda_launch_plan.h"
#include "fp8_dummy/cuda/philox.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {
namespace {

using cuda::ReferenceGrid;

// The reference's launches for n float16 elements with the generator at `offset`,
// each reservation taken in turn as torch's generator hands them out; returns the
// generator offset after them.
template <typename Launch>
uint64_t emulate_launches(int64_t n, int64_t sm_count, int64_t max_threads_per_sm, uint64_t offset,
                          Launch&& launch) {
  FreshOffsets offsets{offset};
  cuda::reference_launches(n, sm_count, max_threads_per_sm, offsets, launch);
  return offsets.next;
}

// Runs `fill(pos, half_bits)` for every element of a reference uniform_ over n
// float16 values (pos in the temp's memory order) and returns the generator offset
// after it.
template <typename Fill>
uint64_t emulate_uniform(int64_t n, const cuda::UniformParams& params, uint64_t seed,
                         uint64_t offset, int64_t sm_count, int64_t max_threads_per_sm,
                         Fill&& fill) {
  return emulate_launches(
      n, sm_count, max_threads_per_sm, offset,
      [&](int64_t start, int64_t count, const ReferenceGrid& grid, uint64_t at) {
        for (int64_t k = 0; k < grid.steps; ++k) {
          for (int64_t idx = 0; idx < grid.threads; ++idx) {
            const cuda::Words4 words = cuda::philox_words(seed, idx, at, k);
            for (int ii = 0; ii < 4; ++ii) {
              const int64_t m = cuda::element_of(idx, k, ii, grid.threads);
              if (m < count) fill(start + m, cuda::uniform_half(words.w[ii], params));
            }
          }
        }
      });
}

int64_t emulate_cuda_init(at::Tensor& self, double low, double high, int64_t seed, int64_t offset,
                          int64_t sm_count, int64_t max_threads_per_sm, bool saturate_e4m3fn,
                          bool contiguous_temp) {
  check_init_args(self, low, high);
  const auto dtype = self.scalar_type();
  TORCH_CHECK(self.device().is_cpu(), "fp8_dummy_test.emulate_cuda_init_: expects a CPU tensor");
  TORCH_CHECK(uses_half_temp(dtype) || dtype == c10::ScalarType::Half,
              "fp8_dummy_test.emulate_cuda_init_: emulates 1-byte (FP8, int8, uint8) and "
              "float16 tensors, got ",
              dtype);
  TORCH_CHECK(sm_count > 0 && max_threads_per_sm >= cuda::kBlockThreads,
              "fp8_dummy_test.emulate_cuda_init_: bad device properties");
  const int64_t n = self.numel();
  if (n == 0) return offset;  // nothing drawn, generator unchanged
  const auto params = cuda::make_uniform_params(low, high);
  // Values in the temp's memory order, then scattered like the CPU kernel does (the
  // emulator is a test tool: its scratch does not matter).
  const bool one_byte = uses_half_temp(dtype);
  const int64_t item = one_byte ? 1 : 2;
  std::vector<uint8_t> values(static_cast<size_t>(n * item));
  uint64_t after;
  if (one_byte) {
    const auto format = fp8_format(dtype);
    const auto overflow = emulated_overflow(format, saturate_e4m3fn);
    after = emulate_uniform(
        n, params, seed, offset, sm_count, max_threads_per_sm,
        [&](int64_t pos, uint16_t h) { values[pos] = cuda::half_to_fp8(h, format, overflow); });
  } else {
    after = emulate_uniform(n, params, seed, offset, sm_count, max_threads_per_sm,
                            [&](int64_t pos, uint16_t h) { std::memcpy(&values[pos * 2], &h, 2); });
  }
  // float16 self: its own uniform_ (no temp), in memory order.
  const MemoryOrder order = memory_order(self, contiguous_temp && one_byte);
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  if (const auto layout = to_layout(order)) {
    // The kernel's own offset arithmetic, so CPU tests cover it.
    for (int64_t m = 0; m < n; ++m) {
      std::memcpy(base + layout->offset(m) * item, &values[m * item], item);
    }
  } else {
    for (int64_t m = 0; m < n; ++m) {  // more dimensions than a layout: element by element
      int64_t rest = m, off = 0;
      for (auto d = static_cast<int64_t>(order.sizes.size()) - 1; d >= 0; --d) {
        off += rest % order.sizes[d] * order.strides[d];
        rest /= order.sizes[d];
      }
      std::memcpy(base + off * item, &values[m * item], item);
    }
  }
  return static_cast<int64_t>(after);
}

// [offset after, then per launch: start, count, threads, steps, offset used].
std::vector<int64_t> cuda_launch_plan(int64_t n, int64_t sm_count, int64_t max_threads_per_sm,
                                      int64_t offset) {
  TORCH_CHECK(n > 0 && sm_count > 0 && max_threads_per_sm >= cuda::kBlockThreads,
              "fp8_dummy_test.cuda_launch_plan: bad arguments");
  std::vector<int64_t> plan{0};
  const uint64_t after = emulate_launches(
      n, sm_count, max_threads_per_sm, static_cast<uint64_t>(offset),
      [&](int64_t start, int64_t count, const ReferenceGrid& grid, uint64_t at) {
        plan.insert(plan.end(), {start, count, grid.threads, grid.steps, static_cast<int64_t>(at)});
      });
  plan[0] = static_cast<int64_t>(after);
  return plan;
}

at::Tensor fp8_convert_table(c10::ScalarType dtype, bool saturate_e4m3fn) {
  const auto format = fp8_format(dtype);
  const auto overflow = emulated_overflow(format, saturate_e4m3fn);
  auto table = at::empty({65536}, at::TensorOptions().dtype(at::kByte));
  auto* out = table.mutable_data_ptr<uint8_t>();
  for (uint32_t h = 0; h < 65536; ++h) {
    out[h] = cuda::half_to_fp8(static_cast<uint16_t>(h), format, overflow);
  }
  return table;
}

void check_table(const at::Tensor& table) {
  TORCH_CHECK(table.scalar_type() == at::kByte && table.numel() == 65536 && table.is_cpu(),
              "fp8_dummy_test.pick_fp8_mode: expects CPU uint8 tensors of 65536 bytes");
}

std::vector<int64_t> pick_fp8_mode_op(const at::Tensor& table, c10::ScalarType dtype,
                                      const std::optional<at::Tensor>& hw_table) {
  check_table(table);
  if (hw_table.has_value()) check_table(*hw_table);
  const auto hw = hw_table.has_value() ? hw_table->contiguous() : at::Tensor();
  const auto found = match_conversion(dtype, table.contiguous().const_data_ptr<uint8_t>(),
                                      hw.defined() ? hw.const_data_ptr<uint8_t>() : nullptr);
  if (!found) return {-1, 0};
  return {static_cast<int64_t>(found->mode), found->hw ? 1 : 0};
}

std::vector<int64_t> philox_op(at::IntArrayRef counter, at::IntArrayRef key) {
  TORCH_CHECK(counter.size() == 4 && key.size() == 2,
              "fp8_dummy_test.philox4x32_10: expects 4 counter words and 2 key words");
  cuda::Words4 c;
  for (int i = 0; i < 4; ++i) c.w[i] = static_cast<uint32_t>(counter[i]);
  const auto out =
      cuda::philox4x32_10(c, static_cast<uint32_t>(key[0]), static_cast<uint32_t>(key[1]));
  return {out.w[0], out.w[1], out.w[2], out.w[3]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_test, CPU, m) {
  m.impl("emulate_cuda_init_", TORCH_FN(emulate_cuda_init));
}

TORCH_LIBRARY_IMPL(fp8_dummy_test, CompositeImplicitAutograd, m) {
  m.impl("cuda_launch_plan", TORCH_FN(cuda_launch_plan));
  m.impl("fp8_convert_table", TORCH_FN(fp8_convert_table));
  m.impl("pick_fp8_mode", TORCH_FN(pick_fp8_mode_op));
  m.impl("philox4x32_10", TORCH_FN(philox_op));
}

}  // namespace fp8_dummy
