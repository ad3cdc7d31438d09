// init_many_: which tensors of a call a batched launch takes (the CUDA kernel and its
// emulator alike), and the per-tensor path for the others.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace fp8_dummy {

struct BatchPlan {
  std::vector<std::vector<size_t>> groups;  // per (device, dtype), a launch each: indices
  std::vector<size_t> singles;              // the per-tensor path's, in call order
};

// Every tensor's argument checks, before anything is written.
void check_init_many_args(at::TensorList tensors, double low, double high);

// Batched: non-empty 1-byte tensors on `device_type` whose temp's order is one dense run
// (with contiguous_temp: row-major contiguous ones) sharing no byte with another tensor.
// The others (non-empty) run per tensor after the batches, in call order, so the last one
// written wins as in the reference loop.
BatchPlan plan_batches(at::TensorList tensors, c10::DeviceType device_type,
                       bool contiguous_temp = false);

// fp8_dummy::init_ through the dispatcher (any device).
void init_one(const at::Tensor& t, double low, double high, int64_t seed, bool contiguous_temp);

}  // namespace fp8_dummy
