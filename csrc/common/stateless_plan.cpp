#include "common/stateless_plan.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/arange.h>
#include <c10/util/irange.h>
#include <c10/util/safe_numerics.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>

#include "common/proof.h"
#include "common/reference.h"

namespace fp8_dummy {

void check_stateless_values(const at::Tensor& self, double low, double high) {
  TORCH_CHECK(self.defined(), "fp8_dummy.init_stateless_: expected a tensor, got an undefined one");
  proof::check_fault_switch();
  if (!is_int8(self.scalar_type())) {  // int8/uint8: random bytes
    check_init_args(self, low, high, OpName{"fp8_dummy.init_stateless_"});
    return;
  }
  const bool is_signed = self.scalar_type() == c10::ScalarType::Char;
  const double min = is_signed ? -128.0 : 0.0;
  const double max = is_signed ? 128.0 : 256.0;  // one past the largest value
  TORCH_CHECK(
      std::floor(low) == low && std::floor(high) == high && min <= low && low < high && high <= max,
      "fp8_dummy.init_stateless_: ", self.scalar_type(), " takes integer bounds low < high in [",
      min, ", ", max, "] (values in [low, high)), ", "got low=", low, ", high=", high);
  check_distinct(self, OpName{"fp8_dummy.init_stateless_"});
}

void stateless_on_cpu(at::Tensor& t, double low, double high, int64_t seed, int64_t key_offset,
                      int64_t element_offset, at::OptionalIntArrayRef element_strides) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fp8_dummy::init_stateless_", "")
                             .typed<void(at::Tensor&, double, double, int64_t, int64_t, int64_t,
                                         at::OptionalIntArrayRef)>();
  op.call(t, low, high, seed, key_offset, element_offset, element_strides);
}

ShardGeometry check_stateless_args(const at::Tensor& self, double low, double high,
                                   int64_t element_offset,
                                   at::OptionalIntArrayRef element_strides) {
  check_stateless_values(self, low, high);
  const int64_t dim = self.dim();
  TORCH_CHECK(element_offset >= 0, "fp8_dummy.init_stateless_: element_offset must be >= 0, got ",
              element_offset);
  if (element_strides.has_value()) {
    TORCH_CHECK(static_cast<int64_t>(element_strides->size()) == dim,
                "fp8_dummy.init_stateless_: element_strides needs one entry per dimension of "
                "self (",
                dim, "), got ", element_strides->size());
    for (const int64_t stride : *element_strides) {
      TORCH_CHECK(stride >= 0, "fp8_dummy.init_stateless_: element_strides must be >= 0, got ",
                  stride);
    }
  }
  // With symbolic shapes (a fake kernel) the real kernel runs the checks that need sizes.
  if (self.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return {};
  c10::SmallVector<int64_t, 6> global(dim);
  if (element_strides.has_value()) {
    for (const auto d : c10::irange(dim)) {
      global[d] = (*element_strides)[d];
      // A zero stride would give several elements one global index: not a shard.
      TORCH_CHECK(global[d] > 0 || self.size(d) <= 1, "fp8_dummy.init_stateless_: element_strides[",
                  d, "] is 0 but dimension ", d, " has size ", self.size(d),
                  " (elements would share a global index)");
    }
  } else {
    int64_t stride = 1;  // row-major strides of self's shape: e = logical linear index
    for (int64_t d = dim - 1; d >= 0; --d) {
      global[d] = stride;
      stride *= std::max<int64_t>(self.size(d), 1);
    }
  }
  // The largest global index must fit in int64 (it is a Philox counter position).
  int64_t last = element_offset;
  if (self.numel() > 0) {
    for (const auto d : c10::irange(dim)) {
      int64_t span = 0;
      TORCH_CHECK(!c10::mul_overflows(self.size(d) - 1, global[d], &span) &&
                      !c10::add_overflows(last, span, &last),
                  "fp8_dummy.init_stateless_: global element indices overflow int64");
    }
  }
  // A shard's elements are distinct in the global tensor: strides failing first_overlap
  // (such as [1, 1]) are refused.
  TORCH_CHECK(first_overlap(self.sizes(), global).first < 0,
              "fp8_dummy.init_stateless_: element_strides ", global,
              " give two elements of self (sizes ", self.sizes(),
              ") the same global index; each stride must exceed what the smaller ones reach");
  ShardGeometry g;
  g.element_offset = element_offset;
  for (const auto d : c10::irange(dim)) {
    const int64_t size = self.size(d);
    if (size == 1) continue;
    append_dim(g.sizes, size, g.self_strides, self.stride(d), &g.global_strides, global[d]);
  }
  return g;
}

cuda::StatelessParams stateless_params(c10::ScalarType dtype, double low, double high) {
  switch (dtype) {
    case c10::ScalarType::BFloat16:
      return cuda::stateless_params_bf16(low, high);
    case c10::ScalarType::Float:
      return cuda::stateless_params_float(low, high);
    case c10::ScalarType::Double:
      return cuda::stateless_params_double(low, high);
    case c10::ScalarType::Char:
    case c10::ScalarType::Byte:
      return cuda::stateless_params_int(low, high);
    default:
      return cuda::stateless_params_half(low, high);  // float16 and FP8
  }
}

std::array<uint16_t, 2048> stateless_half_table(const cuda::StatelessParams& p) {
  // The last bounds' table is kept: a model's weights usually share them (tens of us each).
  static std::mutex mutex;
  static float last_from = 0.0f, last_range = -1.0f;  // range < 0: empty
  static std::array<uint16_t, 2048> last;
  std::lock_guard<std::mutex> lock(mutex);
  if (std::memcmp(&p.from, &last_from, sizeof(float)) != 0 ||
      std::memcmp(&p.range, &last_range, sizeof(float)) != 0) {
    for (uint32_t bits = 0; bits < 2048; ++bits) last[bits] = cuda::stateless_half(bits, p);
    last_from = p.from;
    last_range = p.range;
  }
  return last;
}

std::array<uint8_t, 2048> stateless_fp8_table(c10::ScalarType dtype,
                                              const cuda::StatelessParams& p) {
  const uint8_t* copy = cpu_copy_fp8_table(dtype);
  const auto halves = stateless_half_table(p);
  std::array<uint8_t, 2048> out;
  for (uint32_t bits = 0; bits < 2048; ++bits) out[bits] = copy[halves[bits]];
  return out;
}

namespace {

void check_stateless_args_op(const at::Tensor& self, double low, double high,
                             int64_t element_offset, at::OptionalIntArrayRef element_strides) {
  check_stateless_args(self, low, high, element_offset, element_strides);
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeExplicitAutograd, m) {
  m.impl("check_stateless_args", TORCH_FN(check_stateless_args_op));
}

}  // namespace fp8_dummy
