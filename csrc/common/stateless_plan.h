// The stateless mode's host side, for its CPU and CUDA kernels: checks, the shard geometry,
// the per-call tables from a word's random bits to output bytes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/OptionalArrayRef.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <cstdint>

#include "fp8_dummy/cuda/stateless.h"

namespace fp8_dummy {

// self as a row-major walk: element idx is at self_strides . idx and is global element
// element_offset + global_strides . idx (coalesced where contiguous in both; empty: one).
struct ShardGeometry {
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> self_strides;
  c10::SmallVector<int64_t, 6> global_strides;
  int64_t element_offset = 0;
};

// The dtype and bounds: init_'s checks for floats; int8/uint8: integers low < high within
// the dtype's range (high one past its largest), as random_(from, to).
void check_stateless_values(const at::Tensor& self, double low, double high);

// init_stateless_ on a CPU tensor through the dispatcher (the CUDA kernel's reference).
void stateless_on_cpu(at::Tensor& t, double low, double high, int64_t seed, int64_t key_offset,
                      int64_t element_offset, at::OptionalIntArrayRef element_strides);

// Every check of init_stateless_, before anything is written (with symbolic shapes, those
// that need no size); the geometry.
ShardGeometry check_stateless_args(const at::Tensor& self, double low, double high,
                                   int64_t element_offset, at::OptionalIntArrayRef element_strides);

cuda::StatelessParams stateless_params(c10::ScalarType dtype, double low, double high);

// float16 bits for each of the 2048 values of a word's 11 random bits (stateless_half).
std::array<uint16_t, 2048> stateless_half_table(const cuda::StatelessParams& p);

// FP8: torch's CPU copy_ of stateless_half (on every device: the mode is device-independent).
std::array<uint8_t, 2048> stateless_fp8_table(c10::ScalarType dtype,
                                              const cuda::StatelessParams& p);

}  // namespace fp8_dummy
