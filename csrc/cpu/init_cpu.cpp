// CPU kernel. 1-byte tensors (FP8, int8, uint8) take one of two paths that give the
// reference's bytes (for either float16 temp: empty_like's memory order, or with
// contiguous_temp the row-major order of torch.empty(shape), common/reference.h):
//  - exact: random numbers from torch's own uniform_ on a small float16 buffer (the CPU
//    stream is one mt19937 word per element in memory order, so filling in pieces gives the
//    reference's bytes), through a float16 -> byte table built from torch's own copy_,
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
#include "cpu/init_fast_fill.h"
#include "cpu/init_fast_path.h"

namespace fp8_dummy {
namespace {

constexpr int64_t kChunk = int64_t{1} << 18;  // float16 elements: 512 KiB of scratch

void fill_fp8_exact(const at::Tensor& self, double low, double high,
                    const std::optional<at::Generator>& gen, bool contiguous_temp) {
  const int64_t n = self.numel();
  const uint8_t* table = cpu_copy_fp8_table(self.scalar_type());
  StridedWalk walk(memory_order(self, contiguous_temp));
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

void fill_fp8(const at::Tensor& self, double low, double high,
              const std::optional<at::Generator>& gen, int64_t seed, bool contiguous_temp) {
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
    const cpu::FastPlan plan = cpu::plan_fast(self, low, high, *kernels, contiguous_temp);
    // Forced paths (FP8_DUMMY_CPU_PATH) skip the proof, for tests and benchmarks.
    static proof::Memo<cpu::kFastCodes> memo;
    const bool use =
        path != cpu::CpuPath::kAuto ||
        memo.proven(
            cpu::fast_code(self, plan, generator_form),
            [&] { return cpu::fast_key(self, plan, generator_form); },
            [&] { return cpu::probe_fast(self, low, high, seed, plan, generator_form); });
    if (use && cpu::fill_fp8_fast(self, g, plan)) return;
  }
  fill_fp8_exact(self, low, high, g, contiguous_temp);
}

void fill(const at::Tensor& self, double low, double high, const std::optional<at::Generator>& gen,
          int64_t seed, bool contiguous_temp) {
  if (uses_half_temp(self.scalar_type())) {
    fill_fp8(self, low, high, gen, seed, contiguous_temp);
  } else if (gen.has_value()) {
    // float16 and wider: the reference is uniform_ on the tensor itself (no temp, so
    // contiguous_temp changes nothing).
    at::Tensor(self).uniform_(low, high, *gen);
  } else {
    at::Tensor(self).uniform_(low, high,
                              at::detail::createCPUGenerator(static_cast<uint64_t>(seed)));
  }
}

void init_seed_cpu(at::Tensor& self, double low, double high, int64_t seed, bool contiguous_temp) {
  check_init_args(self, low, high);
  if (self.numel() == 0) return;  // the reference draws nothing either
  // Same state as torch.Generator().manual_seed(seed): mt19937 seeded with the low
  // 32 bits of the seed's two's-complement value (made in fill()).
  fill(self, low, high, std::nullopt, seed, contiguous_temp);
}

void init_generator_cpu(at::Tensor& self, double low, double high, std::optional<at::Generator> gen,
                        bool contiguous_temp) {
  check_init_args(self, low, high);
  TORCH_CHECK(!gen.has_value() || !gen->defined() || gen->device().is_cpu(),
              "fp8_dummy.init_: expected a generator of device type 'cpu' for a CPU tensor, "
              "got one of device '",
              gen.has_value() && gen->defined() ? gen->device().str() : "", "'");
  if (self.numel() == 0) return;
  // The generator form: the caller's generator, or the default one.
  const bool given = gen.has_value() && gen->defined();
  fill(self, low, high, given ? *gen : at::detail::getDefaultCPUGenerator(), /*seed=*/0,
       contiguous_temp);
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
