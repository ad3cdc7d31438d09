// init_many_: which tensors of a call a batched launch takes (the CUDA kernel and its
// CPU emulator decide alike), and the per-tensor path for the others.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace fp8_dummy {

struct BatchPlan {
  // Per (device, FP8 dtype), in order of first appearance: indices into the call's list,
  // in call order. Each group is one batched launch.
  std::vector<std::vector<size_t>> groups;
  // Indices of the tensors that take the per-tensor path, in call order.
  std::vector<size_t> singles;
};

// Every tensor's argument checks, before anything is written (as init_ on each would
// fail, but without having filled the tensors before the bad one).
void check_init_many_args(at::TensorList tensors, double low, double high);

// Batched: non-empty 1-byte tensors (FP8, int8, uint8) on `device_type` whose float16 temp
// would be laid out like the tensor itself without gaps (one dense run of bytes; contiguous,
// transposed, permuted, channels_last; with contiguous_temp only row-major contiguous
// tensors), that share no byte range with another tensor of the call.
// Tensors whose byte ranges meet (partial overlaps, aliases) stay on the per-tensor
// path, which runs after the batches in call order, so the last one written wins as in
// the reference loop; batched tensors touch no byte of another tensor, so running them
// first changes nothing. Other non-empty tensors: per-tensor. Empty ones: neither.
BatchPlan plan_batches(at::TensorList tensors, c10::DeviceType device_type,
                       bool contiguous_temp = false);

// fp8_dummy::init_(t, low, high, seed, contiguous_temp=...) through the dispatcher (any device).
void init_one(const at::Tensor& t, double low, double high, int64_t seed, bool contiguous_temp);

}  // namespace fp8_dummy
