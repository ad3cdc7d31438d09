// The batched kernel's work table (torch-free, host + device): each tensor's reference
// launches (fresh generators), their work items in tiles numbered across pieces.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda_plan/cuda_work_item.h"
#include "fp8_dummy/cuda/config.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {
namespace cuda_kernels {

constexpr int kTile = 256;  // work items per tile = threads per block of the batched kernel

// n / d for n < 2^28 and 64 <= d < 2^28 (a piece's work item over its group count: both
// bounded by work_items) by one high multiply and a shift instead of a division per item.
// With c = ceil(log2 d), k = 28 + c and m = ceil(2^k / d) = (2^k + e) / d, 0 <= e < d:
// n m / 2^k = n / d + n e / (d 2^k), and n e < 2^28 d <= 2^k, so with n = q d + r the excess
// is below (r + 1) / d <= 1: the floor is q. m < 2^k / d + 1 <= 2^29 + 1 fits 32 bits, and
// k >= 34 (d >= 64), so the quotient is the high word of n m shifted by k - 32.
struct Divider {
  uint32_t m;
  uint8_t shift;  // k - 32
};

inline Divider make_divider(uint32_t d) {
  int c = 0;
  while ((uint64_t{1} << c) < d) ++c;
  const int k = 28 + c;
  return {static_cast<uint32_t>(((uint64_t{1} << k) + d - 1) / d), static_cast<uint8_t>(k - 32)};
}

FP8_DUMMY_HD uint32_t divide(uint32_t n, uint32_t m, int shift) {
  return static_cast<uint32_t>((static_cast<uint64_t>(n) * m) >> 32) >> shift;
}

// One reference launch (32-bit piece) of one tensor.
struct BatchPiece {
  uint8_t* data;       // the tensor's first byte
  int64_t start;       // the piece's first element
  int64_t count;       // its elements (<= 2^30)
  int64_t threads;     // the reference launch's T
  uint64_t offset;     // the Philox counter offset it uses
  int64_t tile_begin;  // its first tile
  uint32_t steps;      // grid-stride steps of the reference launch
  uint32_t tensor;     // the tensor's index among the call's inputs
  bool aligned;        // data + start 4-byte aligned: word stores
  uint8_t div_shift;   // make_divider(threads / kGroup): a work item's step by a multiply
  uint32_t div_m;
};
static_assert(sizeof(BatchPiece) == 64, "one piece, one 64-byte line of the table");

// What all pieces of a launch share.
struct BatchCall {
  // The seed's round keys (cuda::philox_keys), made on the host: the rounds read them from
  // the parameter bank as operands, where keys made in the kernel are remade per work item.
  cuda::PhiloxKeys keys;
  cuda::UniformParams uniform;
  cuda::E4m3fnOverflow overflow;
  bool use_hw;
};

struct BatchTensor {
  uint8_t* data;  // first byte of a dense tensor (element m of the temp is byte m)
  int64_t numel;  // > 0
};

struct BatchTable {
  std::vector<BatchPiece> pieces;
  int64_t tiles = 0;
};

// The table: the launches init_ would make for each tensor, in order. Host only.
inline BatchTable build_batch_table(const std::vector<BatchTensor>& tensors, int64_t sm_count,
                                    int64_t max_threads_per_sm) {
  BatchTable table;
  table.pieces.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const BatchTensor& t = tensors[i];
    cuda::FreshOffsets fresh;  // a fresh generator per tensor
    cuda::reference_launches(
        t.numel, sm_count, max_threads_per_sm, fresh,
        [&](int64_t start, int64_t count, const cuda::ReferenceGrid& grid, uint64_t at) {
          BatchPiece p{};
          p.data = t.data;
          p.start = start;
          p.count = count;
          p.threads = grid.threads;
          p.offset = at;
          p.tile_begin = table.tiles;
          p.steps = static_cast<uint32_t>(grid.steps);
          p.tensor = static_cast<uint32_t>(i);
          p.aligned = reinterpret_cast<uintptr_t>(t.data + start) % 4 == 0;
          // T is a multiple of 256 and T / 4 * steps < 2^28 (work_items): the divider's range
          const Divider div = make_divider(static_cast<uint32_t>(grid.threads / kGroup));
          p.div_m = div.m;
          p.div_shift = div.shift;
          table.pieces.push_back(p);
          table.tiles += (work_items(grid.threads, grid.steps) + kTile - 1) / kTile;
        });
  }
  return table;
}

// The piece holding `tile` (the last with tile_begin <= tile), from `lo`, a block's last
// answer (its tiles only grow): gallops ahead 1, 2, 4, ... pieces, then a binary search.
FP8_DUMMY_HD int64_t find_piece(const BatchPiece* pieces, int64_t n, int64_t tile, int64_t lo) {
  int64_t stride = 1;
  int64_t hi = lo + 1;
  while (hi < n && pieces[hi].tile_begin <= tile) {
    lo = hi;
    stride *= 2;
    hi = lo + stride;
  }
  if (hi > n) hi = n;
  // pieces[lo].tile_begin <= tile < pieces[hi].tile_begin (hi = n: the end)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (pieces[mid].tile_begin <= tile) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Item `lane` of `tile` of piece p, numbered as by the per-tensor kernel: its first
// subsequence and step; false past the piece's last item.
FP8_DUMMY_HD bool tile_item(const BatchPiece& p, int64_t tile, uint32_t lane, int64_t* idx,
                            uint32_t* step) {
  const auto groups = static_cast<uint32_t>(p.threads / kGroup);
  const uint64_t item = static_cast<uint64_t>(tile - p.tile_begin) * kTile + lane;
  if (item >= static_cast<uint64_t>(groups) * p.steps) return false;
  const auto w = static_cast<uint32_t>(item);
  *step = divide(w, p.div_m, p.div_shift);  // w / groups
  const uint32_t group = w - *step * groups;
#if defined(__CUDA_ARCH__)
  // group < 2^28 told to the compiler: the subsequences' high words are 0, their index a
  // 32-bit shift, not a wide multiply per item.
  __builtin_assume(group < (1u << 28));
#endif
  *idx = static_cast<int64_t>(group) * kGroup;
  return true;
}

// Thread `lane` of block `block` of `grid`: visit(piece, idx, step) for each of its items,
// tiles block, block + grid, ... (the kernel and the emulator).
template <typename Visit>
FP8_DUMMY_HD void for_each_batch_item(const BatchPiece* pieces, int64_t n, int64_t tiles,
                                      uint32_t block, uint32_t grid, uint32_t lane, Visit& visit) {
  int64_t p = 0;
  for (int64_t tile = block; tile < tiles; tile += grid) {
    p = find_piece(pieces, n, tile, p);
    int64_t idx;
    uint32_t step;
    if (tile_item(pieces[p], tile, lane, &idx, &step)) visit(pieces[p], idx, step);
  }
}

// The visit of the batched kernel: the per-tensor kernel's work item on a dense tensor.
template <cuda::Fp8Format F>
struct FillDense {
  const BatchCall& call;  // the kernel's parameter itself (__grid_constant__), not a copy
  FP8_DUMMY_HD void operator()(const BatchPiece& p, int64_t idx, uint32_t step) const {
    ItemArgs a{};
    a.data = p.data;
    a.start = p.start;
    a.count = p.count;
    a.threads = p.threads;
    a.uniform = call.uniform;
    a.overflow = call.overflow;
    a.use_hw = call.use_hw;
    a.aligned = p.aligned;
    fill_item<F, true>(a, call.keys, p.offset, idx, step);
  }
};

}  // namespace cuda_kernels
}  // namespace fp8_dummy
