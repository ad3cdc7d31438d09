// Runs the stateless CUDA kernels (csrc/cuda/stateless_kernel.cuh) as plain host C++,
// one emulated thread after another, and checks every element they write against a
// per-element reference loop (global index -> Philox call -> value) for many
// geometries: contiguous, offsets that are not unit-aligned, views with gaps, shards
// whose inner dimension is not consecutive globally, every dtype (integer bytes too). It checks the
// kernels' index arithmetic (units, slots, grid stride, bounds) on a GPU-less machine;
// the device arithmetic itself needs a GPU (tests/test_stateless_cuda.py).
// Built and run by tests/test_stateless_api.py::test_cuda_kernel_index_logic_on_host.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct Dim3 {
  unsigned x = 0;
};
static Dim3 blockIdx, blockDim, threadIdx, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __grid_constant__
#define __shared__ static  // one block at a time: see run()
#define __syncthreads() (void)0

#include "../csrc/cuda/stateless_kernel.cuh"

using namespace fp8_dummy;
namespace sk = stateless_kernels;

template <typename Out>
using Kernel = void (*)(const sk::Args);

// Every (block, thread) in turn. The shared FP8 table is a static here, complete only
// after one full pass, so the grid runs twice and the second pass is checked.
template <typename Out>
void run(Kernel<Out> kernel, const sk::Args& a, unsigned blocks, unsigned threads) {
  gridDim.x = blocks;
  blockDim.x = threads;
  for (int pass = 0; pass < 2; ++pass) {
    for (unsigned b = 0; b < blocks; ++b) {
      for (unsigned t = 0; t < threads; ++t) {
        blockIdx.x = b;
        threadIdx.x = t;
        kernel(a);
      }
    }
  }
}

constexpr uint32_t kSeed0 = 1234, kSeed1 = 7;

template <typename Out>
typename Out::Elem reference(const sk::Args& a, int64_t e) {
  // Philox under the key itself, not the round keys the kernel reads from its arguments.
  const uint64_t c = a.key_offset + static_cast<uint64_t>(e / Out::kPer);
  const auto w = cuda::philox4x32_10(
      cuda::Words4{{static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u}}, kSeed0,
      kSeed1);
  return Out::value(w, static_cast<int>(e % Out::kPer), a.table, a.params);
}

int failures = 0;

// A shard of `sizes` (row-major logical order) stored at self_strides inside a buffer,
// whose element idx is global element offset + global_strides . idx.
template <typename Out>
void check(const char* name, std::vector<int64_t> sizes, std::vector<int64_t> self_strides,
           std::vector<int64_t> global_strides, int64_t offset, int64_t storage_offset = 0) {
  using Elem = typename Out::Elem;
  sk::Args a{};
  a.keys = cuda::philox_keys(kSeed0, kSeed1);
  a.key_offset = 0xfffffffffffffff0ull;  // counters wrap
  a.params = cuda::stateless_params_float(-1.0, 1.0);
  if (sizeof(Elem) == 8) a.params = cuda::stateless_params_double(-1.0, 1.0);
  if (sizeof(Elem) == 2) a.params = cuda::stateless_params_half(-1.0, 1.0);
  if (!Out::kTable && sizeof(Elem) == 1) a.params = cuda::stateless_params_int(-100.0, 77.0);
  for (int i = 0; i < 2048; ++i) a.table[i] = static_cast<uint8_t>(i * 37 + (i >> 8));
  a.element_offset = offset;
  a.ndim = static_cast<int>(sizes.size());
  a.numel = 1;
  int64_t extent = 1;
  for (int d = 0; d < a.ndim; ++d) {
    a.sizes[d] = sizes[d];
    a.self_strides[d] = self_strides[d];
    a.global_strides[d] = global_strides[d];
    a.numel *= sizes[d];
    extent += (sizes[d] - 1) * self_strides[d];
  }
  std::vector<Elem> storage(storage_offset + extent + 16);
  std::memset(storage.data(), 0x55, storage.size() * sizeof(Elem));
  a.data = storage.data() + storage_offset;
  const bool linear = a.ndim == 1 && self_strides[0] == 1 && global_strides[0] == 1;
  for (unsigned blocks : {1u, 3u}) {
    for (unsigned threads : {1u, 5u, 32u}) {
      run<Out>(linear ? sk::linear_kernel<Out> : sk::general_kernel<Out>, a, blocks, threads);
      std::vector<bool> written(storage.size(), false);
      std::vector<int64_t> idx(a.ndim, 0);
      for (int64_t j = 0; j < a.numel; ++j) {
        int64_t off = storage_offset, e = offset;
        for (int d = 0; d < a.ndim; ++d) {
          off += idx[d] * self_strides[d];
          e += idx[d] * global_strides[d];
        }
        written[off] = true;
        const Elem want = reference<Out>(a, e);
        if (std::memcmp(&storage[off], &want, sizeof(Elem)) != 0) {
          if (failures++ < 10)
            std::printf("FAIL %s: element %lld (global %lld)\n", name, static_cast<long long>(j),
                        static_cast<long long>(e));
        }
        for (int d = a.ndim - 1; d >= 0 && ++idx[d] == sizes[d]; --d) idx[d] = 0;
      }
      Elem poison;
      std::memset(&poison, 0x55, sizeof(Elem));
      for (size_t i = 0; i < storage.size(); ++i) {
        if (!written[i] && std::memcmp(&storage[i], &poison, sizeof(Elem)) != 0) {
          if (failures++ < 10) std::printf("FAIL %s: wrote outside at %zu\n", name, i);
        }
      }
      std::memset(storage.data(), 0x55, storage.size() * sizeof(Elem));
    }
  }
}

template <typename Out>
void all_geometries() {
  for (int64_t n : {1, 3, 15, 16, 17, 100, 1003}) {
    for (int64_t off : {0, 1, 5, 16, 1000003}) {
      check<Out>("linear", {n}, {1}, {1}, off);
      check<Out>("linear_unaligned", {n}, {1}, {1}, off, 1);
    }
  }
  check<Out>("rows_gap", {7, 13}, {40, 2}, {13, 1}, 0);     // x[:, ::2]-like
  check<Out>("transposed", {9, 6}, {1, 9}, {6, 1}, 3);      // x.t()
  check<Out>("column_shard", {11, 5}, {5, 1}, {23, 1}, 7);  // rows of a wider matrix
  check<Out>("column_of_one", {11}, {1}, {23}, 4);          // not consecutive globally
  check<Out>("block_3d", {3, 4, 6}, {48, 12, 2}, {200, 20, 1}, 21);
  check<Out>("strided_global", {6, 7}, {7, 1}, {1, 6}, 0);  // transposed placement
  // Rows longer than a unit of calls: whole units stored unchecked between partial ends.
  check<Out>("long_rows_gap", {5, 70}, {150, 2}, {70, 1}, 3);
  check<Out>("long_column_shard", {4, 101}, {101, 1}, {333, 1}, 9);
}

int main() {
  all_geometries<sk::Fp8Out>();
  all_geometries<sk::ByteOut>();
  all_geometries<sk::HalfOut>();
  all_geometries<sk::Bf16Out>();
  all_geometries<sk::FloatOut>();
  all_geometries<sk::DoubleOut>();
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
  return failures ? 1 : 0;
}
