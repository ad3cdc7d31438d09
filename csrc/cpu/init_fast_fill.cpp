// See cpu/init_fast_fill.h.
#include "cpu/init_fast_fill.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "common/reference.h"
#include "cpu/fp8_convert_avx2.h"
#include "cpu/scatter_bytes.h"

namespace fp8_dummy {
namespace cpu {

void Fp8Converter::operator()(const uint16_t* h, int64_t len, uint8_t* dst) const {
#ifdef FP8_DUMMY_X86
  if (direct) return fp8_from_halves_avx2(h, len, format, tiny, dst);
#endif
  for (int64_t i = 0; i < len; ++i) dst[i] = table[h[i]];
}

namespace {

Fp8Converter make_converter(c10::ScalarType dtype, double low, double high, bool simd) {
  Fp8Converter c{cpu_copy_fp8_table(dtype), fp8_format(dtype)};
#ifdef FP8_DUMMY_X86
  // Every value drawn lies between half(low) and half(high), give or take a rounding of
  // the range; the margins keep them all well inside the ranges the forms are valid for.
  const double bound = std::max(std::abs(low), std::abs(high));
  c.direct = simd && c.format.supported && bound <= 0.99 * c.format.max_finite &&
             fp8_direct_ok(c.format, c.table);
  c.tiny = c.direct && bound <= 0.99 * c.format.min_normal();
#endif
  return c;
}

// The FP8 bytes as a step function of the random bits (cpu/fp8_runs.h), where that holds
// (a format whose conversion is monotone, bounds within its finite range), has few steps,
// and the tensor is large enough for the ~10 us of finding them to pay. The steps are found
// with the portable transform, so only where that one passed the self-check.
std::optional<Fp8Runs> fp8_runs(c10::ScalarType dtype, int64_t n, double low, double high,
                                const UniformParams& params, const uint8_t* table) {
  constexpr int64_t kMinElements = 2048;
  const Fp8Format format = fp8_format(dtype);
  const double bound = std::max(std::abs(low), std::abs(high));
  // int8/uint8: truncation is monotone where nothing wraps (TensorRT-LLM's int8 +-3 gives
  // 6 runs); FP8: within the finite range.
  const bool monotone = dtype == c10::ScalarType::Char ? bound <= 127.0
                        : dtype == c10::ScalarType::Byte
                            ? low >= 0.0 && high <= 255.0
                            : format.supported && bound <= 0.99 * format.max_finite;
  if (n < kMinElements || !monotone || !fast_config().ok[static_cast<int>(SimdLevel::kPortable)]) {
    return std::nullopt;
  }
  Fp8Runs runs;
  if (!make_fp8_runs(params, table, &runs)) return std::nullopt;
  return runs;
}

// Rows per band of the banded writer, or 0 for the plain scatter. Worth it where a column of
// a band is at least 16 contiguous bytes; a band is at most about 1 MiB, all threads' at most
// about 8 MiB (plus a cache line per row: band_pitch).
int64_t band_rows(const MemoryOrder& o, bool contiguous_temp, int threads) {
  constexpr int64_t kBandBytes = int64_t{1} << 20, kAllBands = int64_t{8} << 20, kMinRows = 16;
  if (!contiguous_temp || o.sizes.size() != 2 || o.strides[0] != 1 || o.strides[1] <= 1) return 0;
  const int64_t cols = o.sizes[1];
  const int64_t rows = std::min({kBandBytes / cols, kAllBands / (cols * threads), o.sizes[0]});
  return rows >= kMinRows ? rows : 0;
}

// A band's rows in the buffer are `pitch` bytes apart: an odd number of cache lines, so the
// lines of one column (read row after row below) fall into different cache sets (a power-of-two
// pitch would put them all in one set and miss on every read).
int64_t band_pitch(int64_t cols) {
  const int64_t lines = (cols + 63) / 64;
  return 64 * (lines % 2 == 1 ? lines : lines + 1);
}

// Rows [row0, row0 + rows) of a 2-D walk whose rows are contiguous in memory (stride 1) and
// whose columns are `stride` apart, from `buf` (row k of the band at k * pitch): `rows`
// contiguous bytes per column, instead of a cache line touched per element.
void write_band(uint8_t* base, const uint8_t* buf, int64_t pitch, int64_t row0, int64_t rows,
                int64_t cols, int64_t stride) {
  for (int64_t j = 0; j < cols; ++j) {
    uint8_t* dst = base + j * stride + row0;
    const uint8_t* src = buf + j;
    for (int64_t k = 0; k < rows; ++k) dst[k] = src[k * pitch];
  }
}

}  // namespace

FastPlan plan_fast(const at::Tensor& self, double low, double high, const Kernels& kernels,
                   bool contiguous_temp) {
  const bool simd = kernels.level != SimdLevel::kPortable;
  FastPlan p{kernels, make_uniform_params(low, high, fast_config().transform),
             make_converter(self.scalar_type(), low, high, simd)};
  p.runs = fp8_runs(self.scalar_type(), self.numel(), low, high, p.params, p.convert.table);
  p.threads = draw_threads(self.numel());
  p.contiguous_temp = contiguous_temp;
  const MemoryOrder order = memory_order(self, contiguous_temp);
  p.linear = order.linear();
  p.band_rows = band_rows(order, contiguous_temp, p.threads);
  return p;
}

// False, having drawn and written nothing, when the generator's state must go to the
// exact path.
bool fill_fp8_fast(const at::Tensor& self, const at::Generator& gen, const FastPlan& plan) {
  const int64_t n = self.numel();
  const MemoryOrder order = memory_order(self, plan.contiguous_temp);
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  auto* g = at::check_generator<at::CPUGeneratorImpl>(gen);
  {
    std::lock_guard<std::mutex> lock(g->mutex_);
    auto pod = g->engine().data();
    if (!stream_usable(pod)) return false;
    const auto& kernels = plan.kernels;
    const auto& params = plan.params;
    // A block at a time: words -> FP8 bytes from the runs, or words -> float16 bits (in
    // cache) -> FP8 bytes.
    auto to_bytes = [&](const uint32_t* words, int64_t len, uint8_t* dst) {
      if (plan.runs) return kernels.runs(words, len, params.mask, *plan.runs, dst);
      alignas(32) uint16_t halves[kMtN];
      kernels.transform(words, len, /*temper=*/true, params, halves);
      plan.convert(halves, len, dst);
    };
    if (order.linear()) {
      // Every dense layout: one run, straight into the tensor.
      draw_words(pod, n, kernels, plan.threads,
                 [&](int64_t first, const uint32_t* words, int64_t len) {
                   to_bytes(words, len, base + first);
                 });
    } else if (plan.band_rows > 0 && order.sizes.size() == 2 && order.strides[0] == 1) {
      // Thread ranges start on band boundaries, and each thread's pieces come in order, so
      // every band is filled by one thread, start to end, then written out.
      const int64_t cols = order.sizes[1], band = plan.band_rows * cols;
      const int64_t pitch = band_pitch(cols);
      const std::vector<int64_t> starts = thread_starts(n, plan.threads, band);
      std::vector<std::vector<uint8_t>> bufs(starts.size() - 1);
      auto consume = [&](int64_t first, const uint32_t* words, int64_t len) {
        auto& buf =
            bufs[std::upper_bound(starts.begin(), starts.end() - 1, first) - starts.begin() - 1];
        if (buf.empty()) buf.resize(static_cast<size_t>(plan.band_rows * pitch));
        uint8_t bytes[kMtN];
        to_bytes(words, len, bytes);
        for (int64_t done = 0; done < len;) {  // a block may end rows, and a band
          const int64_t m = first + done, b0 = m / band * band, b1 = std::min(b0 + band, n);
          const int64_t row = (m - b0) / cols, col = (m - b0) - row * cols;
          const int64_t take = std::min(len - done, cols - col);
          std::memcpy(buf.data() + row * pitch + col, bytes + done, static_cast<size_t>(take));
          done += take;
          if (m + take == b1) {
            write_band(base, buf.data(), pitch, b0 / cols, (b1 - b0) / cols, cols,
                       order.strides[1]);
          }
        }
      };
      draw_words(pod, n, kernels, plan.threads, consume, band);
    } else {
      draw_words(pod, n, kernels, plan.threads,
                 [&](int64_t first, const uint32_t* words, int64_t len) {
                   uint8_t bytes[kMtN];
                   to_bytes(words, len, bytes);
                   scatter_bytes(order, base, first, bytes, len);
                 });
    }
    at::mt19937 engine;
    engine.set_data(pod);
    g->set_engine(engine);
  }
  if (proof::fault("cpu.init_")) proof::corrupt(self);
  return true;
}

// The key's parts, each a small number: (format, level, conversion, layout, threads, form).
size_t fast_code(const at::Tensor& self, const FastPlan& p, bool generator_form) {
  const size_t conversion = p.runs ? 0 : p.convert.direct ? (p.convert.tiny ? 1 : 2) : 3;
  size_t code = static_cast<size_t>(fp8_dummy::fp8_format(self.scalar_type()));
  code = code * 3 + static_cast<size_t>(p.kernels.level);
  code = code * 4 + conversion;
  code = code * 3 + (p.linear ? 0 : p.band_rows > 0 ? 1 : 2);
  code = code * 2 + (p.threads > 1 ? 1 : 0);
  code = code * 2 + (generator_form ? 1 : 0);
  return code * 2 + (p.contiguous_temp ? 1 : 0);
}

std::string fast_key(const at::Tensor& self, const FastPlan& p, bool generator_form) {
  std::ostringstream key;
  key << "cpu.init_: " << self.scalar_type() << " simd=" << level_name(p.kernels.level)
      << " conversion="
      << (p.runs             ? "runs"
          : p.convert.direct ? (p.convert.tiny ? "direct-subnormal" : "direct")
                             : "table")
      << " layout="
      << (p.linear          ? "dense"
          : p.band_rows > 0 ? "banded"
                            : "gaps")
      << " threads=" << (p.threads > 1 ? "split" : "one")
      << " generator=" << (generator_form ? "given" : "seed")
      << " temp=" << (p.contiguous_temp ? "contiguous" : "empty_like");
  return key.str();
}

// The call's branch against torch's reference (empty_like float16, or with contiguous_temp
// torch.empty(shape, float16) then .to(dtype) as TensorRT-LLM does; uniform_, copy_) on a
// probe of 2^15 - 5 elements (52 mt19937 blocks: every wrap of the step and a tail) with the
// call's dtype, bounds, plan, temp and generator form: bytes and the generator's state
// afterwards. Below TensorIterator's grain size, and poisoned by memset, so that the probe
// of a small first call starts no OpenMP pool (a process forked after it must not hang).
proof::Verdict probe_fast(const at::Tensor& self, double low, double high, int64_t seed,
                          FastPlan plan, bool generator_form) {
  constexpr int64_t kN = (int64_t{1} << 15) - 5;
  auto make = [&] {
    at::Tensor p;
    if (plan.linear) {
      p = at::empty({kN}, self.options());
    } else if (plan.band_rows > 0) {  // banded: the row-major walk of a transposed view with gaps
      p = at::empty({10, (kN + 4) / 5}, self.options()).slice(0, 0, 10, 2).t();
    } else {  // gaps: every other column of a row-major block
      p = at::empty({(kN + 4) / 5, 10}, self.options()).slice(1, 0, 10, 2);
    }
    std::memset(p.storage().mutable_data(), 0x55, p.storage().nbytes());
    return p;
  };
  at::Tensor ours = make(), ref = make();
  plan.threads = plan.threads > 1 ? std::min(plan.threads, 3) : 1;
  // Many bands of 5 columns (so bands span the threads' ranges and blocks span bands).
  if (plan.band_rows > 0) plan.band_rows = 61;
  auto g_ours = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  auto g_ref = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  if (generator_form) {  // a generator in use: mid-block
    for (int i = 0; i < 7; ++i) {
      at::check_generator<at::CPUGeneratorImpl>(g_ours)->random();
      at::check_generator<at::CPUGeneratorImpl>(g_ref)->random();
    }
  }
  if (!fill_fp8_fast(ours, g_ours, plan)) return {false, "the probe's generator state is unusable"};
  reference_path(ref, low, high, g_ref, plan.contiguous_temp);
  auto verdict = proof::same_bytes(ours, ref, "bytes");
  if (verdict.passed &&
      !same_engine(at::check_generator<at::CPUGeneratorImpl>(g_ours)->engine().data(),
                   at::check_generator<at::CPUGeneratorImpl>(g_ref)->engine().data())) {
    verdict = {false, "the generator's state afterwards differs"};
  }
  return verdict;
}

}  // namespace cpu
}  // namespace fp8_dummy
