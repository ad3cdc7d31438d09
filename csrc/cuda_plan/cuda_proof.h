// The CUDA paths' probes, verdicts and keys (common/proof.h: the mechanism), shared by the
// launchers and the emulators. A probe runs what a real call runs: two full grid steps of the
// reference (4T elements each, T its threads) and a partial one, in the call's layout kind; a
// call over 2^30 elements (split by the reference) on two such pieces at non-zero Philox
// offsets (the cut is host arithmetic, tested on the CPU). At most kMaxProbeBytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/proof.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {
namespace cuda_proof {

constexpr int64_t kMaxProbeBytes = int64_t{64} << 20;
// Device bytes per probe element at most: our probe and the reference's, each with gaps
// (2 + 2), the reference's float16 temp (2), the contiguous temp's .to(dtype) (1).
constexpr int64_t kProbeBytesPerElement = 7;

// The reference's thread count T for a tensor large enough to fill the device's grid.
inline int64_t full_grid_threads(int64_t sm_count, int64_t max_threads_per_sm) {
  return cuda::reference_grid(cuda::kMax32BitHalfElements, sm_count, max_threads_per_sm).threads;
}

// Elements of one probe launch: two full grid steps, half a step and 3 more, within half the
// byte budget (a split probe has two pieces).
inline int64_t probe_piece(int64_t sm_count, int64_t max_threads_per_sm) {
  const int64_t t = full_grid_threads(sm_count, max_threads_per_sm);
  return std::min(2 * 4 * t + 2 * t + 3, (kMaxProbeBytes / kProbeBytesPerElement / 2 - 20) | 1);
}

// Where a split probe's second piece starts: past one piece, on a row of the 5-column probe
// layouts, at an odd address either way (3 mod 4; 0 mod 4 from one element in).
inline int64_t split_start(int64_t piece) { return (piece + 4) / 20 * 20 + 15; }

using proof::Layout;
using proof::make_probe;

inline const char* layout_name(Layout l) {
  const char* names[] = {"layout=dense", "layout=dense-unaligned", "layout=gaps",
                         "layout=row-major-strided"};
  return names[static_cast<int>(l)];
}

inline Layout layout_kind(const at::Tensor& t, bool linear, bool contiguous_temp) {
  if (!linear) return contiguous_temp ? Layout::kRowMajor : Layout::kGaps;
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 4 == 0 ? Layout::kDense : Layout::kUnaligned;
}

// Writes `t` as a generator at (seed, offset) would; returns the offset after it.
using Fill = std::function<uint64_t(at::Tensor& t, uint64_t seed, uint64_t offset)>;
// Writes elements [start, start + count) of t's temp order as one reference launch of count
// elements at Philox (seed, offset) would; returns the offset after it.
using PieceFill = std::function<uint64_t(at::Tensor& t, int64_t start, int64_t count, uint64_t seed,
                                         uint64_t offset)>;

inline std::string offsets_differ(uint64_t ours, uint64_t ref) {
  return "generator offset afterwards " + std::to_string(ours) + ", the reference's " +
         std::to_string(ref);
}

// A dense probe `skip` elements into its storage (its filler bytes before it).
inline at::Tensor make_dense_probe_past(const at::TensorOptions& options, int64_t n, int64_t skip) {
  return make_probe(options, n + skip, Layout::kDense).narrow(0, skip, n);
}

// init_'s probe (at most 2^30 elements): from a generator in use (offset 8) or the seed form's
// fresh one (0); bytes and offset afterwards. A dense tensor takes the linear kernel's 16-byte
// stores where it starts 16-byte aligned and its checked stores where it starts 4 bytes past
// that, so the dense layout is probed at both starts.
inline proof::Verdict init_probe(const at::TensorOptions& options, int64_t n, Layout layout,
                                 bool generator_form, const Fill& ours, const Fill& ref) {
  const uint64_t seed = 20240607, offset = generator_form ? 8 : 0;
  const int64_t size = static_cast<int64_t>(c10::elementSize(options.dtype().toScalarType()));
  const int64_t past = std::max<int64_t>(1, 4 / size);  // 4 bytes, or one wider element
  for (const int64_t skip : {int64_t{0}, past}) {
    if (skip != 0 && layout != Layout::kDense) break;
    at::Tensor a =
        skip == 0 ? make_probe(options, n, layout) : make_dense_probe_past(options, n, skip);
    at::Tensor b =
        skip == 0 ? make_probe(options, n, layout) : make_dense_probe_past(options, n, skip);
    const uint64_t after_ours = ours(a, seed, offset), after_ref = ref(b, seed, offset);
    auto verdict = proof::same_bytes(
        a, b,
        "bytes of " + std::to_string(n) + " elements" +
            (skip == 0 ? "" : " starting " + std::to_string(skip * size) + " bytes in"));
    if (!verdict.passed) return verdict;
    if (after_ours != after_ref) return {false, offsets_differ(after_ours, after_ref)};
  }
  return {true, ""};
}

// The split's probe: two pieces (the second at the other alignment) at non-zero offsets, ours
// launched on the whole tensor, the reference on each piece's view; bytes and offsets.
inline proof::Verdict split_probe(const at::TensorOptions& options, int64_t piece, Layout layout,
                                  const PieceFill& ours, const Fill& ref) {
  const uint64_t seed = 20240607;
  const int64_t start = split_start(piece);
  at::Tensor a = make_probe(options, start + piece, layout);
  at::Tensor b = make_probe(options, start + piece, layout);
  const int64_t n = a.numel(), row = a.dim() == 1 ? 1 : a.size(1);
  uint64_t at = 8 + 4 * static_cast<uint64_t>(piece);
  for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, start}, {start, n - start}}) {
    const uint64_t after_ours = ours(a, first, count, seed, at);
    auto view = b.narrow(0, first / row, count / row);
    const uint64_t after_ref = ref(view, seed, at);
    if (after_ours != after_ref) return {false, offsets_differ(after_ours, after_ref)};
    at = after_ref;
  }
  return proof::same_bytes(a, b, "bytes of " + std::to_string(n) + " elements in two pieces");
}

// The batched kernel's probe sizes: grid steps, tiny, odd, one step and a bit; the last at an
// odd address.
inline std::vector<int64_t> many_probe_numels(int64_t sm_count, int64_t max_threads_per_sm) {
  const int64_t t = full_grid_threads(sm_count, max_threads_per_sm);
  return {probe_piece(sm_count, max_threads_per_sm), 1, 255, 4 * t + 1, 65537};
}

// init_many_'s probe: `ours` fills the list in one call, `ref` one tensor (seed, offset 0).
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

// init_stateless_'s probe against the CPU kernel (the mode's promise): linear, dense from an
// unaligned global index; general, a view with gaps at an offset. At most 8 bytes an element.
using StatelessFill = std::function<void(at::Tensor& t, int64_t element_offset)>;

inline proof::Verdict stateless_probe(const at::TensorOptions& options, int64_t piece, bool linear,
                                      const StatelessFill& ours, const StatelessFill& cpu) {
  const int64_t n = std::min(piece, kMaxProbeBytes / 16);
  const Layout layout = linear ? Layout::kDense : Layout::kGaps;
  const int64_t element_offset = linear ? 13 : 12345;
  at::Tensor a = make_probe(options, n, layout);
  at::Tensor b = make_probe(options.device(at::kCPU), n, layout);
  ours(a, element_offset);
  cpu(b, element_offset);
  return proof::same_bytes(a, b, "bytes of " + std::to_string(n) + " elements");
}

// The keys (launcher and emulator alike): every part that selects the code.
inline std::string init_key(const std::string& device, c10::ScalarType dtype, bool hw,
                            const char* overflow, Layout layout, bool split, bool generator_form,
                            bool contiguous_temp) {
  return proof::key(
      "cuda.init_",
      {device, c10::toString(dtype), hw ? "conversion=hardware" : "conversion=software",
       std::string("overflow=") + overflow, layout_name(layout), split ? "split=yes" : "split=no",
       generator_form ? "generator=given" : "generator=seed",
       contiguous_temp ? "temp=contiguous" : "temp=empty_like"});
}

inline std::string many_key(const std::string& device, c10::ScalarType dtype, bool hw,
                            const char* overflow, bool contiguous_temp) {
  return proof::key("cuda.init_many_", {device, c10::toString(dtype),
                                        hw ? "conversion=hardware" : "conversion=software",
                                        std::string("overflow=") + overflow,
                                        contiguous_temp ? "temp=contiguous" : "temp=empty_like"});
}

inline std::string stateless_key(const std::string& device, c10::ScalarType dtype, bool linear) {
  return proof::key("cuda.init_stateless_",
                    {device, c10::toString(dtype), linear ? "layout=linear" : "layout=general"});
}

}  // namespace cuda_proof
}  // namespace fp8_dummy
