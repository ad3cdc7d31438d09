// The reference path's rules on every device: argument checks, the order in which it hands
// out random numbers, copy_'s tables, and the path itself.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <utility>

#include "fp8_dummy/cuda/fp8_convert.h"

namespace fp8_dummy {

// The five FP8 dtypes.
bool is_fp8(c10::ScalarType dtype);

// int8 and uint8: filled like FP8 (TensorRT-LLM's dummy weights), copy_ truncating to integer.
inline bool is_int8(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Char || dtype == c10::ScalarType::Byte;
}

// The dtypes whose reference is "uniform_ into a float16 temp, then copy_": the 1-byte ones.
inline bool uses_half_temp(c10::ScalarType dtype) { return is_fp8(dtype) || is_int8(dtype); }

// A 1-byte dtype's format in the torch-free headers (also a per-format table index).
inline cuda::Fp8Format fp8_format(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float8_e4m3fn:
      return cuda::Fp8Format::kE4m3fn;
    case c10::ScalarType::Float8_e5m2:
      return cuda::Fp8Format::kE5m2;
    case c10::ScalarType::Float8_e4m3fnuz:
      return cuda::Fp8Format::kE4m3fnuz;
    case c10::ScalarType::Float8_e5m2fnuz:
      return cuda::Fp8Format::kE5m2fnuz;
    case c10::ScalarType::Float8_e8m0fnu:
      return cuda::Fp8Format::kE8m0fnu;
    case c10::ScalarType::Char:
      return cuda::Fp8Format::kInt8;
    case c10::ScalarType::Byte:
      return cuda::Fp8Format::kUint8;
    default:
      TORCH_CHECK(false, "fp8_dummy: not a 1-byte dtype with a float16 temp: ", dtype);
  }
}

// The dtypes whose reference is plain self.uniform_ (16 bits or wider).
bool is_wide_float(c10::ScalarType dtype);

// The prefix of check_init_args' messages: the op called and a list index ("tensors[3]").
struct OpName {
  c10::string_view op = "fp8_dummy.init_";
  int64_t index = -1;
};
std::ostream& operator<<(std::ostream& out, const OpName& name);

// Every check of the reference path (docs/contract.md R6), with its messages, prefixed by the
// op's name; throws before anything is written or drawn.
void check_init_args(const at::Tensor& self, double low, double high, const OpName& name = {});

// The overlap rule of every op that writes: refuses a self whose elements may share memory,
// torch's MemOverlap::Yes (with copy_'s message) and any layout first_overlap does not show
// distinct (torch writes those "too hard" layouts with thread-dependent bytes).
void check_distinct(const at::Tensor& self, const OpName& name);

// Distinct elements, the cheap test: by increasing stride (sizes > 1), each stride must exceed
// the furthest offset the smaller ones reach (dense, permuted, sliced and gapped views pass).
// Returns the first dimension that fails and that offset, or {-1, 0}.
std::pair<int64_t, int64_t> first_overlap(at::IntArrayRef sizes, at::IntArrayRef strides);

// A view of `self` whose row-major order is the float16 temp's memory order (random number
// m goes to its element m): empty_like(self, float16) (vLLM, SGLang), or with
// contiguous_temp torch.empty(self.shape) (TensorRT-LLM: self's row-major order whatever its
// strides). Coalesced (one dimension where the walk is one run of memory), innermost last.
struct MemoryOrder {
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;
  bool linear() const { return sizes.size() <= 1 && (strides.empty() || strides[0] == 1); }
};
MemoryOrder memory_order(const at::Tensor& self, bool contiguous_temp = false);

// Elements [first, first + len) of `order` (1-byte elements from `base`) get src[0 .. len).
void scatter_bytes(const MemoryOrder& order, uint8_t* base, int64_t first, const uint8_t* src,
                   int64_t len);

// Appends a dimension (outermost first), merged into the last where it continues it in every
// stride list given: the one coalescing rule (temp order, random_'s order, stateless shards).
inline void append_dim(c10::SmallVector<int64_t, 6>& sizes, int64_t size,
                       c10::SmallVector<int64_t, 6>& strides, int64_t stride,
                       c10::SmallVector<int64_t, 6>* strides2 = nullptr, int64_t stride2 = 0) {
  if (!sizes.empty() && strides.back() == stride * size &&
      (strides2 == nullptr || strides2->back() == stride2 * size)) {
    sizes.back() *= size;
    strides.back() = stride;
    if (strides2 != nullptr) strides2->back() = stride2;
    return;
  }
  sizes.push_back(size);
  strides.push_back(stride);
  if (strides2 != nullptr) strides2->push_back(stride2);
}

// float16 bits -> byte, made once per 1-byte dtype by the installed torch's CPU copy_.
const uint8_t* cpu_copy_fp8_table(c10::ScalarType dtype);

// A generator form's generator: the one given (of self's device type, else an error naming
// `op`), or the device's default.
at::Generator generator_for(const at::Tensor& self, const std::optional<at::Generator>& gen,
                            const char* op);

// The reference path for a 1-byte self on any device: what proofs compare against, and the
// fallback.
void reference_path(const at::Tensor& self, double low, double high, const at::Generator& gen,
                    bool contiguous_temp);

}  // namespace fp8_dummy
