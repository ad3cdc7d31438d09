// Host-side decisions of the CUDA launchers and their emulators: the 1-byte format a kernel
// is instantiated for, and the kernel's view of a layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <type_traits>

#include "common/reference.h"
#include "cuda_plan/conversion_match.h"
#include "fp8_dummy/cuda/layout.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {

using cuda::FreshOffsets;  // (fp8_dummy/cuda/uniform.h)

// fn(std::integral_constant<cuda::Fp8Format, F>{}): a kernel template per format.
template <typename Fn>
void with_fp8_format(cuda::Fp8Format format, Fn&& fn) {
  using F = cuda::Fp8Format;
  switch (format) {
    case F::kE4m3fn:
      return fn(std::integral_constant<F, F::kE4m3fn>{});
    case F::kE5m2:
      return fn(std::integral_constant<F, F::kE5m2>{});
    case F::kE4m3fnuz:
      return fn(std::integral_constant<F, F::kE4m3fnuz>{});
    case F::kE5m2fnuz:
      return fn(std::integral_constant<F, F::kE5m2fnuz>{});
    case F::kInt8:
      return fn(std::integral_constant<F, F::kInt8>{});
    case F::kUint8:
      return fn(std::integral_constant<F, F::kUint8>{});
    default:
      return fn(std::integral_constant<F, F::kE8m0fnu>{});
  }
}

// The kernel's view of a MemoryOrder; nullopt past kMaxLayoutDims (the reference then).
inline std::optional<cuda::StridedLayout> to_layout(const MemoryOrder& order) {
  cuda::StridedLayout layout{};
  if (order.sizes.empty()) {  // one element
    layout.ndim = 1;
    layout.sizes[0] = layout.inner_size = 1;
    layout.strides[0] = layout.inner_stride = 1;
    return layout;
  }
  if (order.sizes.size() > static_cast<size_t>(cuda::kMaxLayoutDims)) return std::nullopt;
  layout.ndim = static_cast<int>(order.sizes.size());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.sizes[d] = order.sizes[d];
    layout.strides[d] = order.strides[d];
  }
  layout.inner_size = layout.sizes[layout.ndim - 1];
  layout.inner_stride = layout.strides[layout.ndim - 1];
  return layout;
}

}  // namespace fp8_dummy
