// Host-side pieces of the stateless mode shared by its CPU and CUDA kernels: the
// argument checks, the shard geometry (which global element each element of self is)
// and the per-call lookup tables that turn a word's random bits into output bytes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/OptionalArrayRef.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <cstdint>

#include "fp8_dummy/cuda/stateless.h"

namespace fp8_dummy {

// self's elements as a row-major walk over a few dimensions: element at multi-index
// idx lives at self_strides . idx (self's elements) and is global element
// element_offset + global_strides . idx. Size-1 dimensions dropped, dimensions that
// are contiguous in both merged; innermost last. Empty sizes: one element.
struct ShardGeometry {
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> self_strides;
  c10::SmallVector<int64_t, 6> global_strides;
  int64_t element_offset = 0;
};

// int8 and uint8 (random bytes: include/fp8_dummy/cuda/stateless.h).
bool is_stateless_int(c10::ScalarType dtype);

// The dtype and the bounds: init_'s checks for floats; for int8/uint8, integer bounds with
// low < high inside the dtype's range (high one past its largest value), as random_(from, to).
void check_stateless_values(const at::Tensor& self, double low, double high);

// Checks every argument of init_stateless_ (bounds as init_, then the shard
// description) and returns the geometry. Throws before anything is written.
// init_stateless_ on the CPU tensor t through the dispatcher: the mode's reference bytes for
// the CUDA kernel's proof and fallback (cuda/stateless_cuda.cu) and its emulator.
void stateless_on_cpu(at::Tensor& t, double low, double high, int64_t seed, int64_t key_offset,
                      int64_t element_offset, at::OptionalIntArrayRef element_strides);

ShardGeometry check_stateless_args(const at::Tensor& self, double low, double high,
                                   int64_t element_offset, at::OptionalIntArrayRef element_strides);

cuda::StatelessParams stateless_params(c10::ScalarType dtype, double low, double high);

// float16 bits for each of the 2048 values of a word's 11 random bits (stateless_half).
std::array<uint16_t, 2048> stateless_half_table(const cuda::StatelessParams& p);

// For FP8 dtypes: the output byte for each of the 2048 values of a word's 11 random
// bits, i.e. torch's CPU copy_ of stateless_half (the same conversion as CUDA's copy_
// on torch >= 2.13; using the CPU's everywhere keeps the mode device-independent).
std::array<uint8_t, 2048> stateless_fp8_table(c10::ScalarType dtype,
                                              const cuda::StatelessParams& p);

}  // namespace fp8_dummy
