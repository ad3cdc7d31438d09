// Walks a MemoryOrder view in row-major order, a chunk at a time, handing out
// runs along the innermost dimension. The CPU kernels fill chunks of random
// numbers in the temp's memory order and scatter them with this, so any layout
// (dense or with gaps) costs one loop level per run instead of per element.
#pragma once

#include "common/reference.h"

namespace fp8_dummy {

class StridedWalk {
 public:
  explicit StridedWalk(const MemoryOrder& order) : order_(order), index_(order.sizes.size(), 0) {
    if (order_.sizes.empty()) {  // 0-dim or all size-1: a single element
      order_.sizes.push_back(1);
      order_.strides.push_back(1);
      index_.push_back(0);
    }
  }

  // Calls run(offset, stride, len, first) for the next `count` elements, where
  // `offset` is the element offset of the run's first element from the tensor's
  // data pointer, `stride` its inner stride, and `first` the index (within this
  // call) of the random number that goes to it.
  template <typename Run>
  void next(int64_t count, Run&& run) {
    const int64_t last = static_cast<int64_t>(order_.sizes.size()) - 1;
    const int64_t inner_size = order_.sizes[last];
    const int64_t inner_stride = order_.strides[last];
    int64_t first = 0;
    while (first < count) {
      const int64_t len = std::min(inner_size - index_[last], count - first);
      run(offset_ + index_[last] * inner_stride, inner_stride, len, first);
      first += len;
      index_[last] += len;
      if (index_[last] == inner_size) carry(last);
    }
  }

 private:
  // Moves to the start of the next inner run, keeping offset_ (the offset of
  // index_[last] == 0 in the current run) in step with the outer indices.
  void carry(int64_t last) {
    index_[last] = 0;
    for (int64_t d = last - 1; d >= 0; --d) {
      offset_ += order_.strides[d];
      if (++index_[d] < order_.sizes[d]) return;
      offset_ -= order_.strides[d] * order_.sizes[d];
      index_[d] = 0;
    }
  }

  MemoryOrder order_;
  c10::SmallVector<int64_t, 6> index_;
  int64_t offset_ = 0;
};

}  // namespace fp8_dummy
