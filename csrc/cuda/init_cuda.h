// What the per-tensor CUDA path (init_cuda.cu) shares with the batched and stateless ones.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include "cuda_plan/cuda_launch_plan.h"

namespace fp8_dummy {

// torch's CUDA copy_ conversion to self's dtype on its device, found once per (device, dtype);
// nullopt (the reference) when none matches, or inside graph capture before any eager call.
std::optional<Fp8Conversion> fp8_conversion(const at::Tensor& self);

// Whether the per-tensor kernel is proven for a call like this one, probing now if need be.
bool fused_kernel_proven(const at::Tensor& self, double low, double high, bool generator_form,
                         bool contiguous_temp);

// "cuda:0 (NVIDIA H200, 132 SMs)" (the reference's grid depends on the SM count).
const std::string& device_description(const c10::Device& device);

// Blocks of `kKernel` that fit on all SMs at once (one wave; the bytes never depend on it).
template <auto kKernel>
int64_t resident_blocks(int64_t sm_count, int block = 256) {
  static std::atomic<int> per_sm{0};
  int blocks = per_sm.load(std::memory_order_relaxed);
  if (blocks == 0) {
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, block, 0));
    blocks = std::max(blocks, 1);
    per_sm.store(blocks, std::memory_order_relaxed);
  }
  return sm_count * blocks;
}

// kKernel on min(wanted, resident) blocks of `block` threads.
template <auto kKernel, typename... Args>
void launch_resident(int64_t wanted, int block, int64_t sm_count, cudaStream_t stream,
                     const Args&... args) {
  const int64_t blocks = std::min(wanted, resident_blocks<kKernel>(sm_count, block));
  kKernel<<<static_cast<unsigned>(std::max<int64_t>(blocks, 1)), block, 0, stream>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fp8_dummy
