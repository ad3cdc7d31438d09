// Where element m of a launch goes in memory: m counts elements in the memory order
// of the reference's float16 temp (docs/contract.md R2), which for a tensor with gaps is
// a row-major walk over a few (size, stride) dimensions. Torch-free, host and device.
#pragma once

#include <cstdint>

#include "fp8_dummy/cuda/config.h"

namespace fp8_dummy {
namespace cuda {

// Layouts with more coalesced dimensions than this take the caller's slow path.
constexpr int kMaxLayoutDims = 6;

struct StridedLayout {
  int ndim;  // 1 and strides[0] == 1: linear
  int64_t sizes[kMaxLayoutDims];
  int64_t strides[kMaxLayoutDims];  // in elements
  // sizes[ndim - 1] and strides[ndim - 1] again, at fixed places: a kernel that indexes the
  // arrays with ndim - 1 at run time copies them to local memory.
  int64_t inner_size, inner_stride;

  FP8_DUMMY_HD bool linear() const { return ndim == 1 && strides[0] == 1; }

  // Element offset of the m-th element of the walk (innermost dimension last); *inner, where
  // given: its index in the innermost dimension.
  FP8_DUMMY_HD int64_t offset(int64_t m, int64_t* inner = nullptr) const {
    int64_t off = 0;
    for (int d = ndim - 1; d > 0; --d) {
      const int64_t q = m / sizes[d];
      const int64_t i = m - q * sizes[d];
      if (inner != nullptr && d == ndim - 1) *inner = i;
      off += i * strides[d];
      m = q;
    }
    if (inner != nullptr && ndim == 1) *inner = m;
    return off + m * strides[0];
  }
};

}  // namespace cuda
}  // namespace fp8_dummy
