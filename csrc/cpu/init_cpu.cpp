// CPU kernel. FP8 tensors take one of two paths that give the reference's bytes:
//  - exact: random numbers from torch's own uniform_ on a small float16 buffer (the CPU
//    stream is one mt19937 word per element in memory order, so filling in pieces gives the
//    reference's bytes), through a float16 -> FP8 table built from torch's own copy_,
//    scattered in the temp's memory order. Correct by construction, as slow as torch.
//  - fast (cpu/init_fast_path.h): the same stream continued by our own SIMD mt19937 and the
//    installed torch's transform, then FP8 through the same table or an in-register
//    conversion checked against it (cpu/fp8_convert_avx2.h), block by block, on torch's
//    number of intra-op threads (each jumping to its own range of the stream,
//    cpu/mt19937_stream.h); over 10x faster. Used when the once-per-process self-check
//    found which transform the installed torch runs and our kernels reproduce it.
// The environment variable FP8_DUMMY_CPU_PATH, read on every call, picks the path
// (cpu/init_fast_path.h): auto (default): fast at the widest SIMD level that passed the
// self-check, else exact; exact; fast (the widest level the CPU runs, even if it failed
// the self-check: for tests and benchmarks); avx512, avx2, portable (that level, likewise;
// an error where the CPU lacks it). An error too if no transform matched torch at all.
// Either way the state of a generator that torch's engine would misread (set_state with
// inconsistent left/next) goes to the exact path. Scratch: exact 512 KiB; fast about 10 KiB
// per thread (and a 156 KiB table while a thread jumps). Both share the 64 KiB per-dtype tables,
// built once per process.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

#include "common/proof.h"
#include "common/reference.h"
#include "common/strided_walk.h"
#include "cpu/fp8_convert_avx2.h"
#include "cpu/init_fast_path.h"
#include "cpu/scatter_bytes.h"

namespace fp8_dummy {
namespace {

constexpr int64_t kChunk = int64_t{1} << 18;  // float16 elements: 512 KiB of scratch

void fill_fp8_exact(const at::Tensor& self, double low, double high,
                    const std::optional<at::Generator>& gen) {
  const int64_t n = self.numel();
  const uint8_t* table = cpu_copy_fp8_table(self.scalar_type());
  StridedWalk walk(memory_order(self));
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  auto buf = at::empty({std::min(n, kChunk)}, self.options().dtype(at::kHalf));
  // The reference's one uniform_ holds the generator for the whole call; so do we: the
  // pieces draw from a private copy of its state, written back at the end, all under its
  // lock, so a caller sharing the generator never sees a stretch stitched from two places.
  auto* g =
      at::get_generator_or_default<at::CPUGeneratorImpl>(gen, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(g->mutex_);
  const at::Generator private_gen = at::detail::createCPUGenerator();
  auto* copy = at::check_generator<at::CPUGeneratorImpl>(private_gen);
  copy->set_engine(g->engine());  // uniform_ on CPU draws from the engine alone
  for (int64_t done = 0; done < n;) {
    const int64_t count = std::min(kChunk, n - done);
    auto piece = buf.narrow(0, 0, count);
    piece.uniform_(low, high, private_gen);
    const auto* src = static_cast<const uint16_t*>(piece.const_data_ptr());
    walk.next(count, [&](int64_t offset, int64_t stride, int64_t len, int64_t first) {
      uint8_t* dst = base + offset;
      const uint16_t* s = src + first;
      if (stride == 1) {
        for (int64_t i = 0; i < len; ++i) dst[i] = table[s[i]];
      } else {
        for (int64_t i = 0; i < len; ++i) dst[i * stride] = table[s[i]];
      }
    });
    done += count;
  }
  g->set_engine(copy->engine());
}

// The kernels the fast path runs for this call, or nullopt for the exact path.
std::optional<cpu::Kernels> choose_fast_kernels(cpu::CpuPath path) {
  if (path == cpu::CpuPath::kExact) return std::nullopt;
  const cpu::FastConfig& config = cpu::fast_config();
  if (path == cpu::CpuPath::kAuto) {
    if (!config.found) return std::nullopt;
    return cpu::kernels_for(config.best());
  }
  TORCH_CHECK(config.found, "fp8_dummy.init_: FP8_DUMMY_CPU_PATH forces the fast path, but ",
              "there is none for this torch (", config.info, ")");
  return cpu::kernels_for(cpu::forced_level(path, "init_"));
}

// Float16 bits -> FP8 bytes for one block: in registers where that is known to equal the
// table (cpu/fp8_convert_avx2.h: values in range, checked against the table once per dtype),
// else through the table.
struct Fp8Converter {
  const uint8_t* table;
  cpu::Fp8Format format;
  bool direct = false;
  bool tiny = false;  // every value below the format's smallest normal

  void operator()(const uint16_t* h, int64_t len, uint8_t* dst) const {
#ifdef FP8_DUMMY_X86
    if (direct) return cpu::fp8_from_halves_avx2(h, len, format, tiny, dst);
#endif
    for (int64_t i = 0; i < len; ++i) dst[i] = table[h[i]];
  }
};

Fp8Converter make_converter(c10::ScalarType dtype, double low, double high, bool simd) {
  Fp8Converter c{cpu_copy_fp8_table(dtype), cpu::fp8_format(dtype)};
#ifdef FP8_DUMMY_X86
  // Every value drawn lies between half(low) and half(high), give or take a rounding of
  // the range; the margins keep them all well inside the ranges the forms are valid for.
  const double bound = std::max(std::abs(low), std::abs(high));
  c.direct = simd && c.format.supported && bound <= 0.99 * c.format.max_finite &&
             cpu::fp8_direct_ok(c.format, c.table);
  c.tiny = c.direct && bound <= 0.99 * c.format.min_normal();
#endif
  return c;
}

// The FP8 bytes as a step function of the random bits (cpu/fp8_runs.h), where that holds
// (a format whose conversion is monotone, bounds within its finite range), has few steps,
// and the tensor is large enough for the ~10 us of finding them to pay. The steps are found
// with the portable transform, so only where that one passed the self-check.
std::optional<cpu::Fp8Runs> fp8_runs(c10::ScalarType dtype, int64_t n, double low, double high,
                                     const cpu::UniformParams& params, const uint8_t* table) {
  constexpr int64_t kMinElements = 2048;
  const cpu::Fp8Format format = cpu::fp8_format(dtype);
  const double bound = std::max(std::abs(low), std::abs(high));
  if (n < kMinElements || !format.supported || bound > 0.99 * format.max_finite ||
      !cpu::fast_config().ok[static_cast<int>(cpu::SimdLevel::kPortable)]) {
    return std::nullopt;
  }
  cpu::Fp8Runs runs;
  if (!cpu::make_fp8_runs(params, table, &runs)) return std::nullopt;
  return runs;
}

// Everything that selects the fast path's code for one call: made once per call, shared by
// the call and its probe, so the probe runs the call's very branches.
struct FastPlan {
  cpu::Kernels kernels;
  cpu::UniformParams params;
  Fp8Converter convert;
  std::optional<cpu::Fp8Runs> runs;
  int threads;
  bool linear;
};

FastPlan plan_fast(const at::Tensor& self, double low, double high, const cpu::Kernels& kernels) {
  const bool simd = kernels.level != cpu::SimdLevel::kPortable;
  FastPlan p{kernels, cpu::make_uniform_params(low, high, cpu::fast_config().transform),
             make_converter(self.scalar_type(), low, high, simd)};
  p.runs = fp8_runs(self.scalar_type(), self.numel(), low, high, p.params, p.convert.table);
  p.threads = cpu::draw_threads(self.numel());
  p.linear = memory_order(self).linear();
  return p;
}

// False, having drawn and written nothing, when the generator's state must go to the
// exact path.
bool fill_fp8_fast(const at::Tensor& self, const at::Generator& gen, const FastPlan& plan) {
  const int64_t n = self.numel();
  const MemoryOrder order = memory_order(self);
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  auto* g = at::check_generator<at::CPUGeneratorImpl>(gen);
  {
    std::lock_guard<std::mutex> lock(g->mutex_);
    auto pod = g->engine().data();
    if (!cpu::stream_usable(pod)) return false;
    const auto& kernels = plan.kernels;
    const auto& params = plan.params;
    // A block at a time: words -> FP8 bytes from the runs, or words -> float16 bits (in
    // cache) -> FP8 bytes.
    auto to_bytes = [&](const uint32_t* words, int64_t len, uint8_t* dst) {
      if (plan.runs) return kernels.runs(words, len, params.mask, *plan.runs, dst);
      alignas(32) uint16_t halves[cpu::kMtN];
      kernels.transform(words, len, /*temper=*/true, params, halves);
      plan.convert(halves, len, dst);
    };
    if (order.linear()) {
      // Every dense layout: one run, straight into the tensor.
      cpu::draw_words(pod, n, kernels, plan.threads,
                      [&](int64_t first, const uint32_t* words, int64_t len) {
                        to_bytes(words, len, base + first);
                      });
    } else {
      cpu::draw_words(pod, n, kernels, plan.threads,
                      [&](int64_t first, const uint32_t* words, int64_t len) {
                        uint8_t bytes[cpu::kMtN];
                        to_bytes(words, len, bytes);
                        cpu::scatter_bytes(order, base, first, bytes, len);
                      });
    }
    at::mt19937 engine;
    engine.set_data(pod);
    g->set_engine(engine);
  }
  if (proof::fault("cpu.init_")) proof::corrupt(self);
  return true;
}

std::string fast_key(const at::Tensor& self, const FastPlan& p, bool generator_form) {
  std::ostringstream key;
  key << "cpu.init_: " << self.scalar_type() << " simd=" << cpu::level_name(p.kernels.level)
      << " conversion="
      << (p.runs             ? "runs"
          : p.convert.direct ? (p.convert.tiny ? "direct-subnormal" : "direct")
                             : "table")
      << " layout=" << (p.linear ? "dense" : "gaps")
      << " threads=" << (p.threads > 1 ? "split" : "one")
      << " generator=" << (generator_form ? "given" : "seed");
  return key.str();
}

// The call's branch against torch's reference (empty_like float16, uniform_, copy_) on a
// probe of 2^15 - 5 elements (52 mt19937 blocks: every wrap of the step and a tail) with the
// call's dtype, bounds, plan and generator form: bytes and the generator's state
// afterwards. Below TensorIterator's grain size, and poisoned by memset, so that the probe
// of a small first call starts no OpenMP pool (a process forked after it must not hang).
proof::Verdict probe_fast(const at::Tensor& self, double low, double high, int64_t seed,
                          FastPlan plan, bool generator_form) {
  constexpr int64_t kN = (int64_t{1} << 15) - 5;
  auto make = [&] {
    at::Tensor p;
    if (plan.linear) {
      p = at::empty({kN}, self.options());
    } else {  // gaps: every other column of a row-major block
      p = at::empty({(kN + 4) / 5, 10}, self.options()).slice(1, 0, 10, 2);
    }
    std::memset(p.storage().mutable_data(), 0x55, p.storage().nbytes());
    return p;
  };
  at::Tensor ours = make(), ref = make();
  plan.threads = plan.threads > 1 ? std::min(plan.threads, 3) : 1;
  auto g_ours = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  auto g_ref = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  if (generator_form) {  // a generator in use: mid-block
    for (int i = 0; i < 7; ++i) {
      at::check_generator<at::CPUGeneratorImpl>(g_ours)->random();
      at::check_generator<at::CPUGeneratorImpl>(g_ref)->random();
    }
  }
  if (!fill_fp8_fast(ours, g_ours, plan)) return {false, "the probe's generator state is unusable"};
  auto temp = at::empty_like(ref, ref.options().dtype(at::kHalf));
  temp.uniform_(low, high, g_ref);
  ref.copy_(temp);
  auto verdict = proof::same_bytes(ours, ref, "bytes");
  if (verdict.passed &&
      !cpu::same_engine(at::check_generator<at::CPUGeneratorImpl>(g_ours)->engine().data(),
                        at::check_generator<at::CPUGeneratorImpl>(g_ref)->engine().data())) {
    verdict = {false, "the generator's state afterwards differs"};
  }
  return verdict;
}

void fill_fp8(const at::Tensor& self, double low, double high,
              const std::optional<at::Generator>& gen, int64_t seed) {
  const cpu::CpuPath path = cpu::cpu_path_from_env("init_");
  const auto kernels = choose_fast_kernels(path);
  // torch's own message and moment (before any draw); the exact path gets it from torch.
  TORCH_CHECK(!kernels || cpu::fast_config().transform.formula != cpu::Formula::kBits11 ||
                  !cpu::bits11_range_overflows(low, high),
              "Expected to - from <= std::numeric_limits<T>::max() to be true, but got false.  "
              "(Could this error message be improved?  If so, please report an enhancement "
              "request to PyTorch.)");
  // gen: the generator form's generator (the caller's or the default one); none: the seed
  // form, whose fresh generator is made here.
  const bool generator_form = gen.has_value();
  const at::Generator g =
      generator_form ? *gen : at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  if (kernels) {
    const FastPlan plan = plan_fast(self, low, high, *kernels);
    // Forced paths (FP8_DUMMY_CPU_PATH) skip the proof, for tests and benchmarks.
    const bool use = path != cpu::CpuPath::kAuto ||
                     proof::proven(fast_key(self, plan, generator_form), [&] {
                       return probe_fast(self, low, high, seed, plan, generator_form);
                     });
    if (use && fill_fp8_fast(self, g, plan)) return;
  }
  fill_fp8_exact(self, low, high, g);
}

void fill(const at::Tensor& self, double low, double high,
          const std::optional<at::Generator>& gen, int64_t seed) {
  if (is_fp8(self.scalar_type())) {
    fill_fp8(self, low, high, gen, seed);
  } else if (gen.has_value()) {
    // float16 and wider: the reference is uniform_ on the tensor itself.
    at::Tensor(self).uniform_(low, high, *gen);
  } else {
    at::Tensor(self).uniform_(low, high, at::detail::createCPUGenerator(static_cast<uint64_t>(seed)));
  }
}

void init_seed_cpu(at::Tensor& self, double low, double high, int64_t seed) {
  check_init_args(self, low, high);
  if (self.numel() == 0) return;  // the reference draws nothing either
  // Same state as torch.Generator().manual_seed(seed): mt19937 seeded with the low
  // 32 bits of the seed's two's-complement value (made in fill()).
  fill(self, low, high, std::nullopt, seed);
}

void init_generator_cpu(at::Tensor& self, double low, double high,
                        std::optional<at::Generator> gen) {
  check_init_args(self, low, high);
  TORCH_CHECK(!gen.has_value() || !gen->defined() || gen->device().is_cpu(),
              "fp8_dummy.init_: expected a generator of device type 'cpu' for a CPU tensor, "
              "got one of device '",
              gen.has_value() && gen->defined() ? gen->device().str() : "", "'");
  if (self.numel() == 0) return;
  // The generator form: the caller's generator, or the default one.
  const bool given = gen.has_value() && gen->defined();
  fill(self, low, high, given ? *gen : at::detail::getDefaultCPUGenerator(), /*seed=*/0);
}

std::string cpu_fast_path_info() { return cpu::fast_config().info; }

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CPU, m) {
  m.impl("init_", TORCH_FN(init_seed_cpu));
  m.impl("init_.generator", TORCH_FN(init_generator_cpu));
}

// No tensor argument: registered for every backend.
TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeExplicitAutograd, m) {
  m.impl("cpu_fast_path_info", TORCH_FN(cpu_fast_path_info));
}

}  // namespace fp8_dummy
