// Writes a range of bytes, given in the float16 temp's memory order, into a tensor of any
// layout. Unlike StridedWalk this starts anywhere, so threads can each write their own
// blocks; it costs a few divisions per inner run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/reference.h"

namespace fp8_dummy {
namespace cpu {

// Elements [first, first + len) of `order` (random number m goes to its element m) get
// src[0 .. len); `base` is the tensor's data pointer, one byte per element.
inline void scatter_bytes(const MemoryOrder& order, uint8_t* base, int64_t first,
                          const uint8_t* src, int64_t len) {
  const int64_t dims = static_cast<int64_t>(order.sizes.size());
  if (dims == 0) {  // a single element
    if (len > 0) base[0] = src[0];
    return;
  }
  const int64_t inner_size = order.sizes[dims - 1];
  const int64_t inner_stride = order.strides[dims - 1];
  while (len > 0) {
    int64_t rest = first / inner_size;
    const int64_t inner = first - rest * inner_size;
    int64_t offset = inner * inner_stride;
    for (int64_t d = dims - 2; d >= 0; --d) {
      const int64_t q = rest / order.sizes[d];
      offset += (rest - q * order.sizes[d]) * order.strides[d];
      rest = q;
    }
    const int64_t run = std::min(inner_size - inner, len);
    uint8_t* dst = base + offset;
    if (inner_stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(run));
    } else {
      for (int64_t i = 0; i < run; ++i) dst[i * inner_stride] = src[i];
    }
    first += run;
    src += run;
    len -= run;
  }
}

}  // namespace cpu
}  // namespace fp8_dummy
