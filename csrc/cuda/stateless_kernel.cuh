// The stateless kernels (a value depends only on its global index: the grid is free): linear
// (units of 4 Philox calls, 16-byte stores) and general (rows: units of 4 calls of a row per
// thread where a row's global indices are consecutive, else one element per thread).
#pragma once

#include <cstdint>

#include "fp8_dummy/cuda/stateless.h"

namespace fp8_dummy {
namespace stateless_kernels {

constexpr int kBlock = 256;
constexpr int kMaxDims = 8;
constexpr int kUnitCalls = 4;

struct Args {
  void* data;
  int64_t numel;
  // The seed's ten round keys, made on the host (cuda::philox_keys): the rounds read them
  // from the parameter bank as operands, where keys made in the kernel are remade per call.
  cuda::PhiloxKeys keys;
  uint64_t key_offset;
  cuda::StatelessParams params;
  int64_t element_offset;
  int ndim;  // coalesced; 0: one element
  int64_t sizes[kMaxDims];
  int64_t self_strides[kMaxDims];
  int64_t global_strides[kMaxDims];
  uint8_t table[2048];  // FP8: output byte per 11 random bits (made on the host)
};

__device__ __forceinline__ cuda::Words4 call_words(const Args& a, uint64_t call) {
  const uint64_t c = a.key_offset + call;
  return cuda::philox4x32_10(
      cuda::Words4{{static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u}}, a.keys);
}

// w rotated left by s words, with selects (a run-time index puts w in local memory).
__device__ __forceinline__ cuda::Words4 rotate_words(const cuda::Words4& w, int s) {
  cuda::Words4 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = (i + s) & 3;
    r.w[i] = j == 0 ? w.w[0] : j == 1 ? w.w[1] : j == 2 ? w.w[2] : w.w[3];
  }
  return r;
}

// Per dtype: element type, elements per Philox call, value of the k-th element.
struct Fp8Out {
  using Elem = uint8_t;
  static constexpr int kPer = 4;
  static constexpr bool kTable = true;
  __device__ static Elem value(const cuda::Words4& w, int k, const uint8_t* table,
                               const cuda::StatelessParams&) {
    return table[w.w[k] & 0x7ffu];
  }
};
struct ByteOut {  // int8 / uint8
  using Elem = uint8_t;
  static constexpr int kPer = 4;
  static constexpr bool kTable = false;
  __device__ static Elem value(const cuda::Words4& w, int k, const uint8_t*,
                               const cuda::StatelessParams& p) {
    return cuda::stateless_byte(w.w[k], p);
  }
};
struct HalfOut {
  using Elem = uint16_t;
  static constexpr int kPer = 4;
  static constexpr bool kTable = false;
  __device__ static Elem value(const cuda::Words4& w, int k, const uint8_t*,
                               const cuda::StatelessParams& p) {
    return cuda::stateless_half(w.w[k], p);
  }
};
struct Bf16Out {
  using Elem = uint16_t;
  static constexpr int kPer = 4;
  static constexpr bool kTable = false;
  __device__ static Elem value(const cuda::Words4& w, int k, const uint8_t*,
                               const cuda::StatelessParams& p) {
    return cuda::stateless_bf16(w.w[k], p);
  }
};
struct FloatOut {
  using Elem = float;
  static constexpr int kPer = 4;
  static constexpr bool kTable = false;
  __device__ static Elem value(const cuda::Words4& w, int k, const uint8_t*,
                               const cuda::StatelessParams& p) {
    return cuda::stateless_float(w.w[k], p);
  }
};
struct DoubleOut {
  using Elem = double;
  static constexpr int kPer = 2;
  static constexpr bool kTable = false;
  __device__ static Elem value(const cuda::Words4& w, int k, const uint8_t*,
                               const cuda::StatelessParams& p) {
    return cuda::stateless_double(w.w[2 * k], w.w[2 * k + 1], p);
  }
};

// The FP8 table in shared memory (lookups in the parameter space would serialize).
template <typename Out>
__device__ __forceinline__ const uint8_t* load_table(const Args& a, uint8_t* shared) {
  if constexpr (Out::kTable) {
    for (int i = threadIdx.x; i < 2048; i += blockDim.x) shared[i] = a.table[i];
    __syncthreads();
    return shared;
  }
  return nullptr;
}

template <typename Out>
__global__ void __launch_bounds__(kBlock) linear_kernel(const __grid_constant__ Args a) {
  __shared__ uint8_t shared_table[Out::kTable ? 2048 : 1];
  const uint8_t* table = load_table<Out>(a, shared_table);
  using Elem = typename Out::Elem;
  constexpr int64_t kUnit = int64_t{kUnitCalls} * Out::kPer;  // elements per unit
  static_assert(sizeof(Elem) * kUnit % 16 == 0, "units are whole 16-byte vectors");
  Elem* out = static_cast<Elem*>(a.data);
  const int64_t first = a.element_offset - a.element_offset % kUnit;  // unit-aligned
  const int64_t units = (a.element_offset + a.numel - first + kUnit - 1) / kUnit;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < units;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = first + u * kUnit;
    union {
      Elem v[kUnit];
      uint4 vec[sizeof(Elem) * kUnit / 16];
    } buf;
#pragma unroll
    for (int c = 0; c < kUnitCalls; ++c) {
      const cuda::Words4 w = call_words(a, static_cast<uint64_t>(e / Out::kPer + c));
#pragma unroll
      for (int k = 0; k < Out::kPer; ++k)
        buf.v[c * Out::kPer + k] = Out::value(w, k, table, a.params);
    }
    const int64_t j = e - a.element_offset;  // self index of buf.v[0]; may be < 0
    Elem* dst = out + j;
    if (j >= 0 && j + kUnit <= a.numel && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
#pragma unroll
      for (int i = 0; i < static_cast<int>(sizeof(buf.vec) / 16); ++i) {
        reinterpret_cast<uint4*>(dst)[i] = buf.vec[i];
      }
    } else {
#pragma unroll
      for (int i = 0; i < kUnit; ++i) {
        if (j + i >= 0 && j + i < a.numel) dst[i] = buf.v[i];
      }
    }
  }
}

// The row of logical index `row` (all dimensions but the last): its first element's offset
// in self and its global index.
__device__ __forceinline__ void row_start(const Args& a, int64_t row, int64_t* off,
                                          int64_t* e_row) {
  *off = 0;
  *e_row = a.element_offset;
  for (int d = a.ndim - 2; d >= 0; --d) {
    const int64_t q = row / a.sizes[d];
    const int64_t i = row - q * a.sizes[d];
    *off += i * a.self_strides[d];
    *e_row += i * a.global_strides[d];
    row = q;
  }
}

// Rows of the last dimension. Consecutive global indices along a row: a thread takes a unit
// of kUnitCalls consecutive calls of one row (the row's arithmetic once per unit, not per
// call), the elements of a unit wholly inside its row stored without a check each. Otherwise
// one element per thread, its own call.
template <typename Out>
__global__ void __launch_bounds__(kBlock) general_kernel(const __grid_constant__ Args a) {
  __shared__ uint8_t shared_table[Out::kTable ? 2048 : 1];
  const uint8_t* table = load_table<Out>(a, shared_table);
  using Elem = typename Out::Elem;
  constexpr int kPer = Out::kPer;
  constexpr int64_t kUnit = int64_t{kUnitCalls} * kPer;  // elements per unit
  Elem* out = static_cast<Elem*>(a.data);
  const int last = a.ndim - 1;
  const int64_t len = a.sizes[last];
  const int64_t s_in = a.self_strides[last];
  const int64_t g_in = a.global_strides[last];
  const bool consecutive = g_in == 1;
  // Units per row: a row of len consecutive indices touches at most len / kPer + 2 calls.
  const int64_t slots = consecutive ? (len / kPer + 2 + kUnitCalls - 1) / kUnitCalls : len;
  const int64_t rows = a.numel / len;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < rows * slots;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = t / slots;
    const int64_t slot = t - row * slots;
    int64_t off, e_row;
    row_start(a, row, &off, &e_row);
    if (consecutive) {
      const int64_t call0 = e_row / kPer + slot * kUnitCalls;
      const int64_t j0 = call0 * kPer - e_row;  // row index of the unit's first element
      Elem* dst = out + off + j0 * s_in;
      // The whole unit inside the row: a loop of its own, a pointer stepped by s_in (one loop
      // with the check made per element counts 38 SASS instructions per element, not 21).
      if (j0 >= 0 && j0 + kUnit <= len) {
#pragma unroll
        for (int c = 0; c < kUnitCalls; ++c) {
          const cuda::Words4 w = call_words(a, static_cast<uint64_t>(call0 + c));
#pragma unroll
          for (int k = 0; k < kPer; ++k) {
            *dst = Out::value(w, k, table, a.params);
            dst += s_in;
          }
        }
      } else if (j0 < len) {
#pragma unroll
        for (int c = 0; c < kUnitCalls; ++c) {
          const cuda::Words4 w = call_words(a, static_cast<uint64_t>(call0 + c));
#pragma unroll
          for (int k = 0; k < kPer; ++k) {
            const int64_t jj = j0 + c * kPer + k;
            if (jj >= 0 && jj < len) out[off + jj * s_in] = Out::value(w, k, table, a.params);
          }
        }
      }
    } else {
      const int64_t e = e_row + slot * g_in;
      const cuda::Words4 w = call_words(a, static_cast<uint64_t>(e / kPer));
      const int k = static_cast<int>(e % kPer);
      out[off + slot * s_in] = Out::value(rotate_words(w, k * (4 / kPer)), 0, table, a.params);
    }
  }
}

}  // namespace stateless_kernels
}  // namespace fp8_dummy
