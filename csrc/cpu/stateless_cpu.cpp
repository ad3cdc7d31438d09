// init_stateless_ on the CPU: a value depends only on its global index, so the elements are
// split over threads; runs of consecutive indices take 16 Philox calls at a time.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "common/stateless_plan.h"
#include "cpu/stateless_philox_simd.h"
#include "cpu/threads.h"

namespace fp8_dummy {
namespace {

using cuda::Words4;
using stateless_simd::Block;
using stateless_simd::Key;
using stateless_simd::kLanes;

inline Words4 philox_one(uint64_t call, const Key& key) {
  const uint64_t c = key.offset + call;
  return cuda::philox4x32_10(
      Words4{{static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0}}, key.k0, key.k1);
}

// Output policies: kPerCall elements per Philox call; put writes the k-th of them.
template <typename T, int kBits>
struct TableOut {  // FP8 (uint8), float16 and bfloat16 (uint16): value = table[random bits]
  static constexpr int kPerCall = 4;
  using Elem = T;
  const T* table;
  const uint32_t* table32;  // FP8 only: the same bytes widened, for the SIMD gathers
  const void* runs;         // FP8 only: stateless_simd::Runs when the table has few runs
  const void* table64;      // FP8 only: stateless_simd::Table64, for the VBMI permutes
  void put(T* p, const uint32_t* w, int k) const { *p = table[w[k] & ((1u << kBits) - 1)]; }
};
using Fp8Out = TableOut<uint8_t, 11>;
struct Bf16Out : TableOut<uint16_t, 8> {
  bool permutes;  // the CPU has AVX-512 BW: the table (64-byte aligned) by word permutes
};

template <bool kPow2>
struct ByteOut {  // int8 / uint8: low + word % range
  static constexpr int kPerCall = 4;
  using Elem = uint8_t;
  cuda::StatelessParams params;
  // A power-of-two range (the full 256 of packed FP4 codes and raw bytes): word % range is
  // its low bits, a mask instead of a division per byte.
  void put(uint8_t* p, const uint32_t* w, int k) const {
    if constexpr (kPow2) {
      *p = static_cast<uint8_t>(static_cast<uint32_t>(params.int_low) +
                                (w[k] & (params.int_range - 1)));
    } else {
      *p = cuda::stateless_byte(w[k], params);
    }
  }
};

struct FloatOut {
  static constexpr int kPerCall = 4;
  using Elem = float;
  cuda::StatelessParams params;
  void put(float* p, const uint32_t* w, int k) const { *p = cuda::stateless_float(w[k], params); }
};

struct DoubleOut {
  static constexpr int kPerCall = 2;
  using Elem = double;
  cuda::StatelessParams params;
  void put(double* p, const uint32_t* w, int k) const {
    *p = cuda::stateless_double(w[2 * k], w[2 * k + 1], params);
  }
};

template <int kLevel>
void philox_block(uint64_t first, const Key& key, Block& blk) {
#ifdef FP8_DUMMY_X86
  if constexpr (kLevel >= 2) return stateless_simd::philox_avx512(first, key, blk);
  if constexpr (kLevel == 1) return stateless_simd::philox_avx2(first, key, blk);
#endif
  stateless_simd::philox_portable(first, key, blk);
}

// Elements e0 .. e0 + len - 1 (consecutive global indices) to p[0], p[stride], ...
template <int kLevel, typename Out>
void fill_run(const Out& out, typename Out::Elem* p, int64_t stride, uint64_t e0, int64_t len,
              const Key& key) {
  constexpr int kPer = Out::kPerCall;
  int64_t j = 0;
  auto partial = [&](int64_t until) {
    while (j < until) {
      const uint64_t e = e0 + static_cast<uint64_t>(j);
      const Words4 w = philox_one(e / kPer, key);
      for (int k = static_cast<int>(e % kPer); k < kPer && j < until; ++k, ++j) {
        out.put(p + j * stride, w.w, k);
      }
    }
  };
  partial(std::min<int64_t>(len, (kPer - static_cast<int64_t>(e0 % kPer)) % kPer));
  constexpr int64_t kBlockElems = int64_t{kLanes} * kPer;
#ifdef FP8_DUMMY_X86
  if constexpr (kLevel > 0 && std::is_same_v<Out, Fp8Out>) {
    if (stride == 1) {  // the common case: straight to memory, 128 or 64 bytes at a time
      constexpr int64_t kCalls =
          kLevel >= 2 ? stateless_simd::kFp8Calls512 : stateless_simd::kFp8Calls256;
      for (; j + 4 * kCalls <= len; j += 4 * kCalls) {
        const uint64_t first = (e0 + static_cast<uint64_t>(j)) / kPer;
        if constexpr (kLevel >= 2) {
          if (out.runs != nullptr) {
            stateless_simd::fp8_runs_avx512(
                first, key, *static_cast<const stateless_simd::Runs*>(out.runs), p + j);
          } else if (kLevel == 3) {
            stateless_simd::fp8_vbmi(
                first, key, *static_cast<const stateless_simd::Table64*>(out.table64), p + j);
          } else {
            stateless_simd::fp8_avx512(first, key, out.table32, p + j);
          }
        } else {
          stateless_simd::fp8_avx2(first, key, out.table32, p + j);
        }
      }
    }
  }
  if constexpr (kLevel >= 2 && std::is_same_v<Out, Bf16Out>) {
    if (stride == 1 && out.permutes) {  // 128 elements, 256 bytes, at a time
      constexpr int64_t kElems = 4 * stateless_simd::kFp8Calls512;
      for (; j + kElems <= len; j += kElems) {
        stateless_simd::bf16_avx512bw((e0 + static_cast<uint64_t>(j)) / kPer, key, out.table,
                                      p + j);
      }
    }
  }
  if constexpr (kLevel >= 2 && std::is_same_v<Out, ByteOut<true>>) {
    if (stride == 1) {  // packed FP4 codes and raw bytes: 128 at a time, no per-byte stores
      const auto mask = static_cast<uint8_t>(out.params.int_range - 1);
      const auto low = static_cast<uint8_t>(out.params.int_low);
      constexpr int64_t kBytes = 4 * stateless_simd::kFp8Calls512;
      for (; j + kBytes <= len; j += kBytes) {
        const uint64_t first = (e0 + static_cast<uint64_t>(j)) / kPer;
        stateless_simd::bytes_avx512(first, key, mask, low, p + j);
      }
    }
  }
#endif
  Block blk;
  for (; j + kBlockElems <= len; j += kBlockElems) {
    philox_block<kLevel>((e0 + static_cast<uint64_t>(j)) / kPer, key, blk);
    typename Out::Elem* q = p + j * stride;
    for (int lane = 0; lane < kLanes; ++lane) {
      const uint32_t w[4] = {blk.w[0][lane], blk.w[1][lane], blk.w[2][lane], blk.w[3][lane]};
      for (int k = 0; k < kPer; ++k) out.put(q + (lane * kPer + k) * stride, w, k);
    }
  }
  partial(len);
}

// Logical elements [begin, end) of the geometry (row-major over g.sizes).
template <int kLevel, typename Out>
void fill_chunk(const Out& out, typename Out::Elem* base, const ShardGeometry& g, int64_t begin,
                int64_t end, const Key& key) {
  const int64_t nd = static_cast<int64_t>(g.sizes.size());
  if (nd == 0) {  // a single element
    fill_run<kLevel>(out, base, 1, static_cast<uint64_t>(g.element_offset), end - begin, key);
    return;
  }
  c10::SmallVector<int64_t, 6> idx(nd);
  int64_t rest = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    idx[d] = rest % g.sizes[d];
    rest /= g.sizes[d];
  }
  const int64_t inner = g.sizes[nd - 1];
  const int64_t s_in = g.self_strides[nd - 1];
  const int64_t g_in = g.global_strides[nd - 1];
  for (int64_t pos = begin; pos < end;) {
    int64_t off = 0, e = g.element_offset;
    for (int64_t d = 0; d < nd; ++d) {
      off += idx[d] * g.self_strides[d];
      e += idx[d] * g.global_strides[d];
    }
    const int64_t len = std::min(inner - idx[nd - 1], end - pos);
    if (g_in == 1) {
      fill_run<kLevel>(out, base + off, s_in, static_cast<uint64_t>(e), len, key);
    } else {  // not consecutive globally: one call per element
      for (int64_t j = 0; j < len; ++j) {
        const uint64_t ej = static_cast<uint64_t>(e + j * g_in);
        const Words4 w = philox_one(ej / Out::kPerCall, key);
        out.put(base + off + j * s_in, w.w, static_cast<int>(ej % Out::kPerCall));
      }
    }
    pos += len;
    idx[nd - 1] += len;
    for (int64_t d = nd - 1; d > 0 && idx[d] == g.sizes[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// Runs body(begin, end) over [0, n) on torch's intra-op thread count (one in a parallel
// region); threads claim chunks as they go, which keeps a busy machine balanced.
template <typename Body>
void parallel_range(int64_t n, const Body& body) {
  constexpr int64_t kGrain = int64_t{1} << 16;  // tens of microseconds of work
  int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  threads = std::min(threads, (n + kGrain - 1) / kGrain);
  if (threads <= 1) {
    body(int64_t{0}, n);
    return;
  }
  // Multiples of 64 elements keep every chunk on whole SIMD blocks.
  const int64_t chunk = (std::max(kGrain, n / (threads * 8)) + 63) / 64 * 64;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t b = next.fetch_add(chunk); b < n; b = next.fetch_add(chunk)) {
      body(b, std::min(n, b + chunk));
    }
  };
  cpu::run_on_threads(static_cast<int>(threads), [&](int) { work(); });
}

// The widest SIMD level (0 portable, 1 AVX2, 2 AVX-512F, 3 AVX-512 with VBMI), capped by
// FP8_DUMMY_STATELESS_SIMD=0..3 (tests).
int simd_level() {
  int widest = static_cast<int>(cpu::widest_level());
#ifdef FP8_DUMMY_X86
  if (widest == 2 && stateless_simd::cpu_has_vbmi()) widest = 3;
#endif
  const char* cap = std::getenv("FP8_DUMMY_STATELESS_SIMD");
  return cap != nullptr && *cap >= '0' && *cap <= '3' ? std::min(widest, *cap - '0') : widest;
}

template <typename Out>
void fill(const Out& out, const at::Tensor& self, const ShardGeometry& g, const Key& key) {
  auto* base = static_cast<typename Out::Elem*>(self.mutable_data_ptr());
  const int level = simd_level();
  auto* chunk = level == 3   ? &fill_chunk<3, Out>
                : level == 2 ? &fill_chunk<2, Out>
                : level == 1 ? &fill_chunk<1, Out>
                             : &fill_chunk<0, Out>;
  parallel_range(self.numel(), [&](int64_t b, int64_t e) { chunk(out, base, g, b, e, key); });
}

void init_stateless_cpu(at::Tensor& self, double low, double high, int64_t seed, int64_t key_offset,
                        int64_t element_offset, at::OptionalIntArrayRef element_strides) {
  const ShardGeometry g = check_stateless_args(self, low, high, element_offset, element_strides);
  if (self.numel() == 0) return;
  const auto useed = static_cast<uint64_t>(seed);
  const Key key{static_cast<uint32_t>(useed), static_cast<uint32_t>(useed >> 32),
                static_cast<uint64_t>(key_offset)};
  const auto dtype = self.scalar_type();
  const cuda::StatelessParams p = stateless_params(dtype, low, high);
  switch (dtype) {
    case c10::ScalarType::Half: {
      const auto table = stateless_half_table(p);
      return fill(TableOut<uint16_t, 11>{table.data(), nullptr, nullptr, nullptr}, self, g, key);
    }
    case c10::ScalarType::BFloat16: {
      alignas(64) std::array<uint16_t, 256> table;  // aligned: the permutes load it whole
      for (uint32_t b = 0; b < 256; ++b) table[b] = cuda::stateless_bf16(b, p);
      bool permutes = false;
#ifdef FP8_DUMMY_X86
      permutes = stateless_simd::cpu_has_avx512bw();
#endif
      return fill(Bf16Out{{table.data(), nullptr, nullptr, nullptr}, permutes}, self, g, key);
    }
    case c10::ScalarType::Float:
      return fill(FloatOut{p}, self, g, key);
    case c10::ScalarType::Double:
      return fill(DoubleOut{p}, self, g, key);
    case c10::ScalarType::Char:
    case c10::ScalarType::Byte:
      if ((p.int_range & (p.int_range - 1)) == 0) return fill(ByteOut<true>{p}, self, g, key);
      return fill(ByteOut<false>{p}, self, g, key);
    default: {  // FP8 (check_stateless_args admitted nothing else)
      const auto table = stateless_fp8_table(dtype, p);
      std::array<uint32_t, 2048> table32;
      for (int b = 0; b < 2048; ++b) table32[b] = table[b];
      const void* runs_ptr = nullptr;
      const void* table64_ptr = nullptr;
#ifdef FP8_DUMMY_X86
      stateless_simd::Runs runs;
      if (stateless_simd::make_runs(table.data(), &runs)) runs_ptr = &runs;
      stateless_simd::Table64 table64;
      std::memcpy(table64.bytes, table.data(), sizeof(table64.bytes));
      table64_ptr = &table64;
#endif
      return fill(Fp8Out{table.data(), table32.data(), runs_ptr, table64_ptr}, self, g, key);
    }
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CPU, m) { m.impl("init_stateless_", TORCH_FN(init_stateless_cpu)); }

}  // namespace fp8_dummy
