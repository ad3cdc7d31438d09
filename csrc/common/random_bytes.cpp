// random_'s checks (ATen's random_from_to_impl's order: overlap, from < to, the dtype's
// range) and order (random_bytes.h).
#include "common/random_bytes.h"

#include <algorithm>
#include <numeric>

#include "common/proof.h"

namespace fp8_dummy {

void check_random_args(const at::Tensor& self, int64_t from, int64_t to) {
  TORCH_CHECK(self.defined(), "fp8_dummy.random_: expected a tensor, got an undefined one");
  proof::check_fault_switch();
  const auto dtype = self.scalar_type();
  TORCH_CHECK(dtype == at::kChar || dtype == at::kByte, "fp8_dummy.random_: unsupported dtype ",
              dtype, "; supported dtypes: int8, uint8 (view other byte-sized formats, such as ",
              "float4_e2m1fn_x2, as uint8)");
  check_distinct(self, OpName{"fp8_dummy.random_"});
  TORCH_CHECK(from < to, "fp8_dummy.random_: random_ expects 'from' to be less than 'to', ",
              "but got from=", from, " >= to=", to);
  // ATen prints the dtype's caffe2::TypeMeta name.
  const bool is_signed = dtype == at::kChar;
  const char* name = is_signed ? "signed char" : "unsigned char";
  const int64_t lo = is_signed ? -128 : 0;
  const int64_t hi = is_signed ? 127 : 255;
  // Built only when a check fails (TORCH_CHECK evaluates its message then): not per call.
  const auto allowed = [&] {
    return c10::str(" (", is_signed ? "int8" : "uint8", " takes low in [", lo, ", ", hi,
                    "] and high in [", lo + 1, ", ", hi + 1, "], got low=", from, ", high=", to,
                    ")");
  };
  TORCH_CHECK(from >= lo && from <= hi, "fp8_dummy.random_: from is out of bounds for ", name,
              allowed());
  TORCH_CHECK(to - 1 >= lo && to - 1 <= hi, "fp8_dummy.random_: to - 1 is out of bounds for ", name,
              allowed());
}

std::optional<MemoryOrder> random_order(const at::Tensor& self) {
  // Dense: TensorIterator's order by stride is the memory order, as memory_order()'s.
  if (self.is_non_overlapping_and_dense()) return memory_order(self);
  // Gaps: TensorIterator puts the smallest stride innermost, and so on up (ties only matter
  // for size-1 dimensions, dropped, or elements that may share memory, refused).
  c10::SmallVector<int64_t, 6> dims;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.size(d) != 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(),
            [&](int64_t a, int64_t b) { return self.stride(a) < self.stride(b); });
  if (first_overlap(self.sizes(), self.strides()).first >= 0) return std::nullopt;
  MemoryOrder order;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    const int64_t size = self.size(*it);
    const int64_t stride = self.stride(*it);
    append_dim(order.sizes, size, order.strides, stride);
  }
  return order;
}

}  // namespace fp8_dummy
