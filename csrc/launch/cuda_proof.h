// The proofs of the CUDA paths (common/proof.h is the mechanism): what their probes are made
// of and how a probe's output is judged, shared by the launchers (cuda/) and the emulator
// (emulator/), so CPU tests run the same planning and verdicts with emulated kernels.
//
// A probe exercises what a real tensor exercises: more than 2 * 4T elements plus an odd
// remainder, T being the reference's thread count for a large tensor on the device (so two
// full grid steps and a partial one run, with the kernel's work walk carrying across
// steps), in the call's layout kind (dense, dense at an odd address, with gaps), past 2^30
// elements when the call is (the reference's split), and for the batched kernel several
// tensors of different sizes in one launch.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/proof.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {
namespace cuda_proof {

// The reference's thread count T for a tensor large enough to fill the device's grid.
inline int64_t full_grid_threads(int64_t sm_count, int64_t max_threads_per_sm) {
  return cuda::reference_grid(cuda::kMax32BitHalfElements, sm_count, max_threads_per_sm).threads;
}

// Elements of a probe: two full grid steps (4T elements each), half a step and 3 more.
inline int64_t probe_numel(int64_t sm_count, int64_t max_threads_per_sm) {
  const int64_t t = full_grid_threads(sm_count, max_threads_per_sm);
  return 2 * 4 * t + 2 * t + 3;
}

// Layout kinds the kernels branch on: the temp's order one run of memory (at an aligned or odd
// address), or a strided walk: empty_like's temp of a view with gaps, or a contiguous temp
// (torch.empty(shape)) of a tensor that is not row-major contiguous (kRowMajor: its probe is a
// transposed view with gaps, whose row-major walk jumps in both dimensions).
enum class Layout { kDense, kUnaligned, kGaps, kRowMajor };

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kDense:
      return "dense";
    case Layout::kUnaligned:
      return "dense-unaligned";
    case Layout::kGaps:
      return "gaps";
    default:
      return "row-major-strided";
  }
}

// The layout kind of a call, given the linearity of its temp's order.
inline Layout layout_kind(const at::Tensor& t, bool linear, bool contiguous_temp) {
  if (!linear) return contiguous_temp ? Layout::kRowMajor : Layout::kGaps;
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 4 == 0 ? Layout::kDense : Layout::kUnaligned;
}

// A probe tensor of at least n elements in that layout, every byte 0x55.
inline at::Tensor make_probe(const at::TensorOptions& options, int64_t n, Layout layout) {
  at::Tensor p;
  if (layout == Layout::kDense) {
    p = at::empty({n}, options);
  } else if (layout == Layout::kUnaligned) {  // one element in: an odd address for 1-byte types
    p = at::empty({n + 1}, options).narrow(0, 1, n);
  } else if (layout == Layout::kGaps) {  // every other column of a row-major block of 10 columns
    p = at::empty({(n + 4) / 5, 10}, options).slice(1, 0, 10, 2);
  } else {  // every other row of a block of 10 rows, transposed
    p = at::empty({10, (n + 4) / 5}, options).slice(0, 0, 10, 2).t();
  }
  at::empty({0}, options.dtype(at::kByte)).set_(p.storage()).fill_(0x55);
  return p;
}

// One probe's fill: writes `t` as a generator at (seed, offset) would, returns the offset
// after it (the seed form: offset 0 before).
using Fill = std::function<uint64_t(at::Tensor& t, uint64_t seed, uint64_t offset)>;

// init_'s probe: `ours` and `ref` on two probes of the call's layout and size class;
// bytes and the generator's offset afterwards compared.
inline proof::Verdict init_probe(const at::TensorOptions& options, int64_t n, Layout layout,
                                 bool generator_form, const Fill& ours, const Fill& ref) {
  // A generator in use sits at some offset; the seed form's fresh one at 0.
  const uint64_t seed = 20240607, offset = generator_form ? 8 : 0;
  at::Tensor a = make_probe(options, n, layout), b = make_probe(options, n, layout);
  const uint64_t after_ours = ours(a, seed, offset);
  const uint64_t after_ref = ref(b, seed, offset);
  auto verdict = proof::same_bytes(a, b, "bytes of " + std::to_string(n) + " elements");
  if (verdict.passed && after_ours != after_ref) {
    verdict = {false, "generator offset afterwards " + std::to_string(after_ours) +
                          ", the reference's " + std::to_string(after_ref)};
  }
  return verdict;
}

// The batched kernel's probe sizes: several grid steps, tiny, odd, one step and a bit, and
// one at an odd address (the others are whole allocations).
inline std::vector<int64_t> many_probe_numels(int64_t sm_count, int64_t max_threads_per_sm) {
  const int64_t t = full_grid_threads(sm_count, max_threads_per_sm);
  return {probe_numel(sm_count, max_threads_per_sm), 1, 255, 4 * t + 1, 65537};
}

// init_many_'s probe: `ours` fills the whole list in one call (each tensor with its own
// fresh generator seeded with `seed`), `ref` one tensor (seed, offset 0); every tensor compared.
inline proof::Verdict many_probe(const at::TensorOptions& options, const std::vector<int64_t>& n,
                                 uint64_t seed,
                                 const std::function<void(std::vector<at::Tensor>&)>& ours,
                                 const Fill& ref) {
  std::vector<at::Tensor> a, b;
  for (size_t i = 0; i < n.size(); ++i) {
    const Layout l = i + 1 == n.size() ? Layout::kUnaligned : Layout::kDense;
    a.push_back(make_probe(options, n[i], l));
    b.push_back(make_probe(options, n[i], l));
  }
  ours(a);
  for (size_t i = 0; i < n.size(); ++i) {
    ref(b[i], seed, 0);
    auto verdict =
        proof::same_bytes(a[i], b[i],
                          "tensor " + std::to_string(i) + " of " + std::to_string(n.size()) + " (" +
                              std::to_string(n[i]) + " elements)");
    if (!verdict.passed) return verdict;
  }
  return {true, ""};
}

// init_stateless_'s probe: `ours` on a CUDA (or emulated) probe against `cpu`, the CPU kernel,
// on a probe of the same layout on the CPU: the same bytes are the mode's promise. Linear:
// dense, from a global index that is not unit-aligned; general: a view with gaps, at an
// offset into the global tensor.
using StatelessFill = std::function<void(at::Tensor& t, int64_t element_offset)>;

inline proof::Verdict stateless_probe(const at::TensorOptions& options, int64_t n, bool linear,
                                      const StatelessFill& ours, const StatelessFill& cpu) {
  const Layout layout = linear ? Layout::kDense : Layout::kGaps;
  const int64_t element_offset = linear ? 13 : 12345;
  at::Tensor a = make_probe(options, n, layout);
  at::Tensor b = make_probe(options.device(at::kCPU), n, layout);
  ours(a, element_offset);
  cpu(b, element_offset);
  return proof::same_bytes(a, b, "bytes of " + std::to_string(n) + " elements");
}

// A key: the path, then `parts` as given ("cuda.init_: cuda:0 (...) Float8_e4m3fn ...").
inline std::string key(const std::string& path, const std::string& device,
                       const std::vector<std::string>& parts) {
  std::ostringstream out;
  out << path << ": " << device;
  for (const auto& p : parts) out << " " << p;
  return out.str();
}

// The key of a per-tensor init_ fill: every part that selects the kernel's code (one text
// for cuda/init_cuda.cu and its emulator, emulator/proven_cuda_emulator.cpp).
inline std::string init_key(const std::string& device, c10::ScalarType dtype,
                            const char* conversion, const char* overflow, Layout layout, bool split,
                            bool generator_form, bool contiguous_temp) {
  return key(
      "cuda.init_", device,
      {c10::toString(dtype), std::string("conversion=") + conversion,
       std::string("overflow=") + overflow, std::string("layout=") + layout_name(layout),
       split ? "split=yes" : "split=no", generator_form ? "generator=given" : "generator=seed",
       contiguous_temp ? "temp=contiguous" : "temp=empty_like"});
}

// The key of a batched init_many_ launch of one dtype (the kernel and its emulator).
inline std::string many_key(const std::string& device, c10::ScalarType dtype,
                            const char* conversion, const char* overflow, bool contiguous_temp) {
  return key("cuda.init_many_", device,
             {c10::toString(dtype), std::string("conversion=") + conversion,
              std::string("overflow=") + overflow,
              contiguous_temp ? "temp=contiguous" : "temp=empty_like"});
}

// The key of a stateless fill (the kernel and its emulator).
inline std::string stateless_key(const std::string& device, c10::ScalarType dtype, bool linear) {
  return key("cuda.init_stateless_", device,
             {c10::toString(dtype), linear ? "layout=linear" : "layout=general"});
}

}  // namespace cuda_proof
}  // namespace fp8_dummy
