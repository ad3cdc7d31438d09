// The CPU fast path of init_ for one call (cpu/init_cpu.cpp chooses it): the plan of what
// the call runs (kernels, transform, FP8 conversion form, threads, layout), the fill itself,
// and its proof key and probe (common/proof.h), which run the plan's very branches.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "common/proof.h"
#include "cpu/fp8_convert_avx2.h"
#include "cpu/fp8_runs.h"
#include "cpu/init_fast_path.h"
#include "fp8_dummy/cuda/fp8_convert.h"

namespace fp8_dummy {
namespace cpu {

// Float16 bits -> FP8 bytes for one block: in registers where that is known to equal the
// table (cpu/fp8_convert_avx2.h: values in range, checked against the table once per dtype),
// else through the table.
struct Fp8Converter {
  const uint8_t* table;
  Fp8Format format;
  bool direct = false;
  bool tiny = false;  // every value below the format's smallest normal

  void operator()(const uint16_t* h, int64_t len, uint8_t* dst) const;
};

// Everything that selects the fast path's code for one call: made once per call, shared by
// the call and its probe, so the probe runs the call's very branches.
struct FastPlan {
  Kernels kernels;
  UniformParams params;
  Fp8Converter convert;
  std::optional<Fp8Runs> runs;
  int threads;
  bool contiguous_temp;  // the temp's order: torch.empty(shape)'s (row-major), else empty_like's
  bool linear;           // that order is one run of memory (common/reference.h, memory_order)
  // > 0: the banded writer, for the contiguous temp of a transposed 2-D view (the walk's
  // inner dimension jumps by its stride, the outer one is contiguous in memory): each thread
  // collects this many whole rows of the walk, then writes them column by column.
  int64_t band_rows = 0;
};

FastPlan plan_fast(const at::Tensor& self, double low, double high, const Kernels& kernels,
                   bool contiguous_temp);

// Fills self from gen's stream; false, having drawn and written nothing, when the
// generator's state must go to the exact path. FP8_DUMMY_FAULT=cpu.init_ corrupts a byte.
bool fill_fp8_fast(const at::Tensor& self, const at::Generator& gen, const FastPlan& plan);

// The proof key of a call and its probe against torch's reference; fast_code numbers the
// same parts (< kFastCodes) for the key's memo (proof::Memo).
constexpr size_t kFastCodes = cuda::kNumFp8Formats * 3 * 4 * 3 * 2 * 2 * 2;
size_t fast_code(const at::Tensor& self, const FastPlan& p, bool generator_form);
std::string fast_key(const at::Tensor& self, const FastPlan& p, bool generator_form);
proof::Verdict probe_fast(const at::Tensor& self, double low, double high, int64_t seed,
                          FastPlan plan, bool generator_form);

}  // namespace cpu
}  // namespace fp8_dummy
