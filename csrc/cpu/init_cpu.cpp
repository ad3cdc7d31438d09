// init_ and init_many_ on the CPU. 1-byte tensors: the exact path (torch's uniform_ on a
// 512 KiB float16 buffer, then copy_'s table) or, where the call's key is proven, the fast
// path (cpu/fast_path.h), in either temp's order; float16 and wider: uniform_ itself.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/init_many_plan.h"
#include "common/proof.h"
#include "common/reference.h"
#include "cpu/fast_path.h"
#include "cpu/first_values.h"

namespace fp8_dummy {
namespace {

constexpr int64_t kChunk = int64_t{1} << 18;  // float16 elements: 512 KiB of scratch

void fill_exact(const at::Tensor& self, double low, double high, const at::Generator& gen,
                bool contiguous_temp) {
  const int64_t n = self.numel();
  const uint8_t* table = cpu_copy_fp8_table(self.scalar_type());
  const MemoryOrder order = memory_order(self, contiguous_temp);
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  auto buf = at::empty({std::min(n, kChunk)}, self.options().dtype(at::kHalf));
  // Held for the whole call, as by the reference's one uniform_: the pieces draw from a copy.
  auto* g = at::check_generator<at::CPUGeneratorImpl>(gen);
  std::lock_guard<std::mutex> lock(g->mutex_);
  const at::Generator private_gen = at::detail::createCPUGenerator();
  auto* copy = at::check_generator<at::CPUGeneratorImpl>(private_gen);
  copy->set_engine(g->engine());  // uniform_ on CPU draws from the engine alone
  for (int64_t done = 0; done < n; done += kChunk) {
    const int64_t count = std::min(kChunk, n - done);
    auto piece = buf.narrow(0, 0, count);
    piece.uniform_(low, high, private_gen);
    const auto* src = static_cast<const uint16_t*>(piece.const_data_ptr());
    auto* bytes = static_cast<uint8_t*>(piece.mutable_data_ptr());  // in place: i <= 2i
    for (int64_t i = 0; i < count; ++i) bytes[i] = table[src[i]];
    scatter_bytes(order, base, done, bytes, count);
  }
  g->set_engine(copy->engine());
}

// ---- The fast path. Float16 bits -> bytes for one block: in registers where that is exact.
struct Converter {
  const uint8_t* table;
  cpu::Fp8Bits bits;
  bool direct = false;
  bool tiny = false;  // every value below the format's smallest normal

  void operator()(const uint16_t* h, int64_t len, uint8_t* dst) const {
#ifdef FP8_DUMMY_X86
    if (direct) return fp8_from_halves_avx2(h, len, bits, tiny, dst);
#endif
    for (int64_t i = 0; i < len; ++i) dst[i] = table[h[i]];
  }
};

// Everything that selects the fast path's code: the call's and its probe's, so that the probe
// runs the call's very branches.
struct Plan {
  cpu::Kernels kernels;
  cpu::UniformParams params;
  Converter convert;
  std::optional<cpu::Fp8Runs> runs;
  int threads;
  bool contiguous_temp;
  bool linear;  // the temp's order is one run of memory
  // > 0: the contiguous temp of a transposed 2-D view: each thread gathers this many rows,
  // then writes them column by column.
  int64_t band_rows = 0;
};

// The bytes as runs (cpu/fp8_bytes.h) where the conversion is monotone within the bounds and
// the tensor pays for the ~10 us of finding them (with the portable transform: if it passed).
std::optional<cpu::Fp8Runs> runs_for(c10::ScalarType dtype, int64_t n, double low, double high,
                                     const cpu::UniformParams& params, const uint8_t* table) {
  const cpu::Fp8Bits bits = cpu::fp8_bits(dtype);
  const double bound = std::max(std::abs(low), std::abs(high));
  const bool monotone = dtype == c10::ScalarType::Char ? bound <= 127.0
                        : dtype == c10::ScalarType::Byte
                            ? low >= 0.0 && high <= 255.0
                            : bits.supported && bound <= 0.99 * bits.max_finite;
  if (n < 2048 || !monotone || !cpu::fast_config().ok[0]) return std::nullopt;
  // Found once per (dtype, bounds): a model's tensors share a few (its params follow from the
  // bounds and the process's one transform).
  using Key = std::tuple<int, uint64_t, uint64_t>;
  static std::mutex mutex;
  static std::map<Key, std::optional<cpu::Fp8Runs>> found;
  uint64_t lo, hi;
  std::memcpy(&lo, &low, sizeof lo);
  std::memcpy(&hi, &high, sizeof hi);
  const Key key{static_cast<int>(dtype), lo, hi};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = found.find(key); it != found.end()) return it->second;
  }
  cpu::Fp8Runs runs;
  std::optional<cpu::Fp8Runs> made;
  if (cpu::make_fp8_runs(params, table, &runs)) made = runs;
  const std::lock_guard<std::mutex> lock(mutex);
  if (found.size() >= 1024) found.clear();
  return found.emplace(key, made).first->second;
}

// Rows per band (>= 16 contiguous bytes per column; ~1 MiB a band, ~8 MiB all), or 0: scatter.
int64_t band_rows(const MemoryOrder& o, bool contiguous_temp, int threads) {
  constexpr int64_t kBandBytes = int64_t{1} << 20, kAllBands = int64_t{8} << 20;
  if (!contiguous_temp || o.sizes.size() != 2 || o.strides[0] != 1 || o.strides[1] <= 1) return 0;
  const int64_t cols = o.sizes[1];
  const int64_t rows = std::min({kBandBytes / cols, kAllBands / (cols * threads), o.sizes[0]});
  return rows >= 16 ? rows : 0;
}

// Rows an odd number of cache lines apart: a column's lines fall into different cache sets.
int64_t band_pitch(int64_t cols) {
  const int64_t lines = (cols + 63) / 64;
  return 64 * (lines % 2 == 1 ? lines : lines + 1);
}

Plan plan_fast(const at::Tensor& self, double low, double high, cpu::SimdLevel level,
               bool contiguous_temp) {
  const cpu::FastConfig& config = cpu::fast_config();
  Plan p{cpu::kernels_for(level),
         cpu::make_uniform_params(low, high, config.transform),
         {cpu_copy_fp8_table(self.scalar_type()), cpu::fp8_bits(self.scalar_type())}};
#ifdef FP8_DUMMY_X86
  // Every value lies between half(low) and half(high), give or take a rounding.
  const double bound = std::max(std::abs(low), std::abs(high));
  Converter& c = p.convert;
  c.direct = level != cpu::SimdLevel::kPortable && c.bits.supported &&
             bound <= 0.99 * c.bits.max_finite && cpu::fp8_direct_ok(c.bits, c.table);
  c.tiny = c.direct && bound <= 0.99 * c.bits.min_normal();
#endif
  p.runs = runs_for(self.scalar_type(), self.numel(), low, high, p.params, p.convert.table);
  p.threads = cpu::draw_threads(self.numel());
  p.contiguous_temp = contiguous_temp;
  const MemoryOrder order = memory_order(self, contiguous_temp);
  p.linear = order.linear();
  p.band_rows = band_rows(order, contiguous_temp, p.threads);
  return p;
}

// Rows [row0, row0 + rows) of a walk of contiguous rows and columns `stride` apart, from `buf`
// (row k at k * pitch).
void write_band(uint8_t* base, const uint8_t* buf, int64_t pitch, int64_t row0, int64_t rows,
                int64_t cols, int64_t stride) {
  for (int64_t j = 0; j < cols; ++j) {
    uint8_t* dst = base + j * stride + row0;
    for (int64_t k = 0; k < rows; ++k) dst[k] = buf[j + k * pitch];
  }
}

// False, having drawn nothing, where the generator's state must go to the exact path.
bool fill_fast(const at::Tensor& self, const at::Generator& gen, const Plan& plan) {
  const int64_t n = self.numel();
  const MemoryOrder order = memory_order(self, plan.contiguous_temp);
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  const cpu::Kernels& k = plan.kernels;
  auto to_bytes = [&](const uint32_t* words, int64_t len, uint8_t* dst) {
    if (plan.runs) return k.runs(words, len, plan.params.mask, *plan.runs, dst);
    alignas(32) uint16_t halves[cpu::kMtN];
    k.transform(words, len, /*temper=*/true, plan.params, halves);
    plan.convert(halves, len, dst);
  };
  auto* g = at::check_generator<at::CPUGeneratorImpl>(gen);
  bool drawn;
  if (order.linear()) {  // every dense layout: straight into the tensor
    drawn = cpu::draw(g, n, k, plan.threads, [&](int64_t first, const uint32_t* w, int64_t len) {
      to_bytes(w, len, base + first);
    });
  } else if (plan.band_rows > 0) {
    // Ranges start on band boundaries: each band is filled by one thread, then written out.
    const int64_t cols = order.sizes[1], band = plan.band_rows * cols;
    const int64_t pitch = band_pitch(cols);
    const std::vector<int64_t> starts = cpu::thread_starts(n, plan.threads, band);
    std::vector<std::vector<uint8_t>> bufs(starts.size() - 1);
    auto consume = [&](int64_t first, const uint32_t* words, int64_t len) {
      auto& buf =
          bufs[std::upper_bound(starts.begin(), starts.end() - 1, first) - starts.begin() - 1];
      if (buf.empty()) buf.resize(static_cast<size_t>(plan.band_rows * pitch));
      uint8_t bytes[cpu::kMtN];
      to_bytes(words, len, bytes);
      for (int64_t done = 0; done < len;) {  // a block may end rows, and a band
        const int64_t m = first + done, b0 = m / band * band, b1 = std::min(b0 + band, n);
        const int64_t row = (m - b0) / cols, col = (m - b0) - row * cols;
        const int64_t take = std::min(len - done, cols - col);
        std::memcpy(buf.data() + row * pitch + col, bytes + done, static_cast<size_t>(take));
        done += take;
        if (m + take == b1) {
          write_band(base, buf.data(), pitch, b0 / cols, (b1 - b0) / cols, cols, order.strides[1]);
        }
      }
    };
    drawn = cpu::draw(g, n, k, plan.threads, consume, band);
  } else {
    drawn = cpu::draw(g, n, k, plan.threads, [&](int64_t first, const uint32_t* w, int64_t len) {
      uint8_t bytes[cpu::kMtN];
      to_bytes(w, len, bytes);
      scatter_bytes(order, base, first, bytes, len);
    });
  }
  if (drawn && proof::fault("cpu.init_")) proof::corrupt(self);
  return drawn;
}

std::string fast_key(const at::Tensor& self, const Plan& p, bool generator_form) {
  return proof::key("cpu.init_", {c10::toString(self.scalar_type()),
                                  std::string("simd=") + cpu::level_name(p.kernels.level),
                                  p.runs              ? "conversion=runs"
                                  : !p.convert.direct ? "conversion=table"
                                  : p.convert.tiny    ? "conversion=direct-subnormal"
                                                      : "conversion=direct",
                                  p.linear          ? "layout=dense"
                                  : p.band_rows > 0 ? "layout=banded"
                                                    : "layout=gaps",
                                  p.threads > 1 ? "threads=split" : "threads=one",
                                  generator_form ? "generator=given" : "generator=seed",
                                  p.contiguous_temp ? "temp=contiguous" : "temp=empty_like"});
}

// The call's plan against the reference on 2^15 - 5 elements (52 blocks: every wrap and a
// tail) of its layout kind, dtype and bounds, up to 3 threads, mid-block for the generator
// form; below TensorIterator's grain: no OpenMP pool starts (a later fork must not hang).
proof::Verdict probe_fast(const at::Tensor& self, double low, double high, int64_t seed, Plan plan,
                          bool generator_form) {
  constexpr int64_t kN = (int64_t{1} << 15) - 5;
  const auto layout = plan.linear          ? proof::Layout::kDense
                      : plan.band_rows > 0 ? proof::Layout::kRowMajor
                                           : proof::Layout::kGaps;
  auto make = [&] { return proof::make_probe(self.options(), kN, layout); };
  plan.threads = std::min(plan.threads, 3);
  if (plan.band_rows > 0) plan.band_rows = 61;  // bands span the threads' ranges and blocks
  return cpu::against_torch(
      make, static_cast<uint64_t>(seed), generator_form ? 7 : 0,
      [&](at::Tensor& t, at::Generator& g) { return fill_fast(t, g, plan); },
      [&](at::Tensor& t, at::Generator& g) {
        reference_path(t, low, high, g, plan.contiguous_temp);
      },
      "bytes");
}

void fill(const at::Tensor& self, double low, double high, const at::Generator& gen,
          bool generator_form, int64_t seed, bool contiguous_temp) {
  if (!uses_half_temp(self.scalar_type())) {  // float16 and wider: no temp
    at::Tensor(self).uniform_(low, high, gen);
    return;
  }
  if (const auto level = cpu::fast_level("init_", &cpu::fast_config)) {
    const cpu::FastConfig& config = cpu::fast_config();
    TORCH_CHECK(config.found, "fp8_dummy.init_: FP8_DUMMY_CPU_PATH forces the fast path, but ",
                "there is none for this torch (", config.info, ")");
    // torch's own message and moment (before any draw).
    TORCH_CHECK(config.transform.formula != cpu::Formula::kBits11 ||
                    !cpu::bits11_range_overflows(low, high),
                "Expected to - from <= std::numeric_limits<T>::max() to be true, but got false.  "
                "(Could this error message be improved?  If so, please report an enhancement "
                "request to PyTorch.)");
    const Plan plan = plan_fast(self, low, high, *level, contiguous_temp);
    if (proof::proven(fast_key(self, plan, generator_form),
                      [&] { return probe_fast(self, low, high, seed, plan, generator_form); }) &&
        fill_fast(self, gen, plan)) {
      return;
    }
  }
  fill_exact(self, low, high, gen, contiguous_temp);
}

// torch.Generator().manual_seed(seed), its first state made once per seed and copied (the
// engines seed every tensor alike; seeding mt19937 walks its 624 words).
at::Generator seeded(int64_t seed) {
  static std::mutex mutex;
  static int64_t last_seed = 0;
  static std::optional<at::Generator> last;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!last || last_seed != seed) {
    last = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
    last_seed = seed;
  }
  return last->clone();
}

void init_seed_cpu(at::Tensor& self, double low, double high, int64_t seed, bool contiguous_temp) {
  check_init_args(self, low, high);
  if (self.numel() == 0) return;  // the reference draws nothing either
  if (cpu::FirstValues(low, high, seed, contiguous_temp).fill(self)) return;
  // torch.Generator().manual_seed(seed): mt19937 seeded with the seed's low 32 bits.
  fill(self, low, high, seeded(seed), false, seed, contiguous_temp);
}

void init_generator_cpu(at::Tensor& self, double low, double high, std::optional<at::Generator> gen,
                        bool contiguous_temp) {
  check_init_args(self, low, high);
  const at::Generator g = generator_for(self, gen, "init_");
  if (self.numel() > 0) fill(self, low, high, g, true, 0, contiguous_temp);
}

// A loop over init_ (no launches to save), every tensor checked first; the small ones from
// the call's first values, looked up once per dtype.
void init_many_cpu(at::TensorList tensors, double low, double high, int64_t seed,
                   bool contiguous_temp) {
  check_init_many_args(tensors, low, high);
  cpu::FirstValues first(low, high, seed, contiguous_temp);
  for (const auto& t : tensors) {
    if (t.numel() > 0 && !first.fill(t)) init_one(t, low, high, seed, contiguous_temp);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CPU, m) {
  m.impl("init_", TORCH_FN(init_seed_cpu));
  m.impl("init_.generator", TORCH_FN(init_generator_cpu));
  m.impl("init_many_", TORCH_FN(init_many_cpu));
}

}  // namespace fp8_dummy
