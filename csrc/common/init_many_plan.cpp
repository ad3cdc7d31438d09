// See init_many_plan.h.
#include "common/init_many_plan.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "common/reference.h"

namespace fp8_dummy {
namespace {

// [first byte, one past the last byte] of the memory t's elements can reach.
std::pair<uintptr_t, uintptr_t> byte_extent(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto first = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  return {first, first + static_cast<uintptr_t>((last + 1) * t.element_size())};
}

// Marks every tensor (of `ids`, one device) whose byte extent meets another's: a sweep in
// address order. Extents cover gaps: a few tensors may lose batching for nothing.
void mark_overlaps(at::TensorList tensors, std::vector<size_t> ids, std::vector<bool>& marked) {
  std::vector<std::pair<uintptr_t, uintptr_t>> extent(tensors.size());
  for (const size_t i : ids) extent[i] = byte_extent(tensors[i]);
  std::sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return extent[a] < extent[b]; });
  size_t begin = 0;
  uintptr_t reach = 0;
  for (size_t k = 0; k <= ids.size(); ++k) {
    if (k == ids.size() || (k > begin && extent[ids[k]].first >= reach)) {
      if (k - begin > 1) {
        for (size_t j = begin; j < k; ++j) marked[ids[j]] = true;
      }
      begin = k;
      reach = 0;
    }
    if (k < ids.size()) reach = std::max(reach, extent[ids[k]].second);
  }
}

}  // namespace

void check_init_many_args(at::TensorList tensors, double low, double high) {
  for (const auto i : c10::irange(tensors.size())) {
    check_init_args(tensors[i], low, high, OpName{"fp8_dummy.init_many_", static_cast<int64_t>(i)});
  }
}

BatchPlan plan_batches(at::TensorList tensors, c10::DeviceType device_type, bool contiguous_temp) {
  BatchPlan plan;
  const auto device_key = [](const at::Tensor& t) {
    return std::make_pair(static_cast<int>(t.device().type()),
                          static_cast<int>(t.device().index()));
  };
  std::map<std::pair<int, int>, std::vector<size_t>> by_device;  // non-empty tensors
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() > 0) by_device[device_key(tensors[i])].push_back(i);
  }
  std::vector<bool> single(tensors.size(), false);
  for (const auto& [device, ids] : by_device) mark_overlaps(tensors, ids, single);
  std::map<std::pair<std::pair<int, int>, int>, size_t> group_of;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (t.numel() == 0) continue;
    if (single[i] || t.device().type() != device_type || !uses_half_temp(t.scalar_type()) ||
        !memory_order(t, contiguous_temp).linear()) {
      plan.singles.push_back(i);
      continue;
    }
    const auto key = std::make_pair(device_key(t), static_cast<int>(t.scalar_type()));
    const auto it = group_of.try_emplace(key, plan.groups.size()).first;
    if (it->second == plan.groups.size()) plan.groups.emplace_back();
    plan.groups[it->second].push_back(i);
  }
  return plan;
}

void init_one(const at::Tensor& t, double low, double high, int64_t seed, bool contiguous_temp) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fp8_dummy::init_", "")
                             .typed<void(at::Tensor&, double, double, int64_t, bool)>();
  at::Tensor self = t;
  op.call(self, low, high, seed, contiguous_temp);
}

}  // namespace fp8_dummy
