// Pieces shared by every device's kernel: argument checks (run before anything is
// written, also by the Meta/fake kernel) and the memory order in which torch's
// reference path hands out random numbers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <optional>

namespace fp8_dummy {

// The dtypes whose reference is "uniform_ into a float16 temp, then copy_".
bool is_fp8(c10::ScalarType dtype);

// The dtypes whose reference is plain self.uniform_ (16 bits or wider).
bool is_wide_float(c10::ScalarType dtype);

// Every check of the reference path (REFERENCE.md §6 and the copy_ overlap check),
// with the reference's messages, prefixed by the op's name. Throws c10::Error
// before anything is written or any random number is drawn.
void check_init_args(const at::Tensor& self, double low, double high);

// A view of `self` whose row-major order is the memory order of the float16 temp
// that empty_like(self, float16) would allocate: random number m goes to element
// m of this view. Coalesced to as few dimensions as possible (one for every dense
// layout), innermost last, strides in elements.
struct MemoryOrder {
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;
  bool linear() const { return sizes.size() <= 1 && (strides.empty() || strides[0] == 1); }
};
MemoryOrder memory_order(const at::Tensor& self);

// float16 bits -> FP8 byte for all 65536 float16 values, made once per dtype by the
// installed torch's CPU copy_, so the conversion (out-of-range values included, which
// changed across torch versions) is the reference's by construction. `dtype` must be
// one of the five FP8 dtypes.
const uint8_t* cpu_copy_fp8_table(c10::ScalarType dtype);

}  // namespace fp8_dummy
