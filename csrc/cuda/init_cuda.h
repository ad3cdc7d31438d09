// What the per-tensor CUDA path (init_cuda.cu) shares with the batched one
// (init_many_cuda.cu): the FP8 conversion found by the one-time probe, and the grid
// size of a grid-stride kernel.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include "launch/cuda_launch_plan.h"

namespace fp8_dummy {

// How torch's copy_ converts float16 to a 1-byte dtype on a device, and whether our
// hardware pair conversion may stand in for it.
struct Fp8Conversion {
  cuda::E4m3fnOverflow mode;
  bool hw;
};

// Found once per (device, dtype) of `self` by converting all 65536 float16 bit patterns
// with torch itself and matching the result against our conversions. nullopt when
// nothing matches, and inside graph capture before the first eager call (the probe
// synchronizes): the caller then takes the exact reference path.
std::optional<Fp8Conversion> fp8_conversion(const at::Tensor& self);

// Whether the per-tensor kernel is proven for a call like this one (its key: device, dtype,
// conversion, layout kind, size class, generator form, temp), probing it now if need be (never
// inside graph capture). init_many_ asks it for the tensors it batches, so that their
// per-tensor path, which a captured init_many_ takes, is proven too.
bool fused_kernel_proven(const at::Tensor& self, double low, double high, bool generator_form,
                         bool contiguous_temp);

// A device as the proof keys name it: "cuda:0 (NVIDIA H200, 132 SMs)". The SM count is in
// the key because the reference's grid, hence its bytes, depends on it.
inline std::string device_description(const c10::Device& device) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device.index());
  return device.str() + " (" + p->name + ", " + std::to_string(p->multiProcessorCount) + " SMs)";
}

// Whether a launch with these bounds may use the packed hardware conversion.
inline bool use_hw_conversion(const Fp8Conversion& conversion, cuda::Fp8Format format,
                              const cuda::UniformParams& uniform) {
  return conversion.hw && cuda::hw_conversion_ok(format, conversion.mode, max_abs_uniform(uniform));
}

// Blocks of `kKernel` (launched with `block` threads) that fit on all SMs at once: the
// kernels loop over their work items, so one full wave and no tail. Cached per kernel
// (the bytes never depend on the grid; a process mixing GPU generations only gets a
// less tuned grid).
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

}  // namespace fp8_dummy
