// random_ on the CPU for int8/uint8 tensors: the bytes of self.random_(from, to, generator=g)
// and g's state afterwards, made by the same parallel mt19937 stream as init_'s fast path
// (cpu/mt19937_stream.h) with random_'s byte transform (cpu/random_bytes_transform.h),
// instead of torch's serial loop (one call of the engine per element).
//
// Torch's CPU random_(from, to) draws one 32-bit word per element (to - from < 2^28) in
// TensorIterator's order (common/random_bytes.h). We use the fast stream only where that
// order is shown (random_order) and the generator's state is one torch's engine reads
// normally; otherwise, and with FP8_DUMMY_CPU_PATH=exact, torch's own random_ runs.
// Like init_, whether our kernels are used by default is decided by evidence: once per
// process each SIMD level is compared with torch's random_ on a scratch generator (bytes
// and final state; power-of-two and other ranges; mid-block; 1 and 3 threads).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

#include "common/proof.h"
#include "common/random_bytes.h"
#include "cpu/init_fast_path.h"
#include "cpu/scatter_bytes.h"

namespace fp8_dummy {
namespace {

// Fills self (int8/uint8, numel > 0, layout `order`) from `gen`'s stream with our kernels.
// False, having drawn and written nothing, when the state must go to torch's kernel.
bool random_fast(const at::Tensor& self, const MemoryOrder& order, int64_t from, int64_t to,
                 at::CPUGeneratorImpl* gen, const cpu::Kernels& kernels, int threads) {
  const cpu::ByteParams params{static_cast<uint32_t>(to - from), static_cast<int32_t>(from)};
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  // One lock for the whole call: the state is read, drawn from through a private copy and
  // written back, as torch's kernel holds it around its loop.
  std::lock_guard<std::mutex> lock(gen->mutex_);
  auto pod = gen->engine().data();
  if (!cpu::stream_usable(pod)) return false;
  const int64_t n = self.numel();
  if (order.linear()) {
    cpu::draw_words(pod, n, kernels, threads,
                    [&](int64_t first, const uint32_t* words, int64_t len) {
                      kernels.bytes(words, len, params, base + first);
                    });
  } else {
    cpu::draw_words(pod, n, kernels, threads,
                    [&](int64_t first, const uint32_t* words, int64_t len) {
                      uint8_t bytes[cpu::kMtN];
                      kernels.bytes(words, len, params, bytes);
                      cpu::scatter_bytes(order, base, first, bytes, len);
                    });
  }
  at::mt19937 engine;
  engine.set_data(pod);
  gen->set_engine(engine);
  return true;
}

// One level's kernels against torch's random_: a few ranges, from mid-block, on 1 and 3
// threads (explicitly: the split and the jumps take part although the size is small).
bool random_self_check(const cpu::Kernels& kernels, std::ostringstream& why) {
  constexpr int64_t kN = (int64_t{1} << 15) + 7;
  const struct {
    at::ScalarType dtype;
    int64_t from, to;
    int threads;
  } cases[] = {{at::kChar, -128, 128, 3},
               {at::kByte, 0, 256, 1},
               {at::kByte, 3, 200, 3},
               {at::kChar, -100, -36, 1}};
  for (const auto& c : cases) {
    auto g_ref = at::detail::createCPUGenerator(20240611);
    auto g_ours = at::detail::createCPUGenerator(20240611);
    auto* ref_impl = at::check_generator<at::CPUGeneratorImpl>(g_ref);
    auto* ours_impl = at::check_generator<at::CPUGeneratorImpl>(g_ours);
    for (int i = 0; i < 5; ++i) {  // leave both mid-block
      ref_impl->random();
      ours_impl->random();
    }
    auto expected = at::empty({kN}, at::TensorOptions().dtype(c.dtype));
    expected.random_(c.from, c.to, g_ref);
    auto got = at::empty({kN}, at::TensorOptions().dtype(c.dtype));
    if (!random_fast(got, memory_order(got), c.from, c.to, ours_impl, kernels, c.threads)) {
      why << " (state unusable)";
      return false;
    }
    if (std::memcmp(got.const_data_ptr(), expected.const_data_ptr(), kN) != 0) {
      why << " (bytes differ for [" << c.from << ", " << c.to << "))";
      return false;
    }
    if (!cpu::same_engine(ref_impl->engine().data(), ours_impl->engine().data())) {
      why << " (generator state differs)";
      return false;
    }
  }
  return true;
}

struct RandomConfig {
  bool ok[3] = {};  // by SimdLevel
  std::string info;
};

// Which of our kernel sets give torch's random_ bytes, found once per process through the
// proof mechanism (common/proof.h): one silent key per level; none passing is a refusal of
// the fast path itself, which warns. Each call's branch is then proven on its own (fill()).
const RandomConfig& random_config() {
  static RandomConfig config;
  static std::once_flag once;
  std::call_once(once, [] {
    std::ostringstream info;
    info << "random_:";
    bool any = false;
    for (int level = 2; level >= 0; --level) {
      const auto l = static_cast<cpu::SimdLevel>(level);
      std::string why;
      if (cpu::cpu_has_level(l)) {
        const std::string key = std::string("cpu.random_: kernels simd=") + cpu::level_name(l);
        config.ok[level] = proof::proven(
            key,
            [&] {
              std::ostringstream out;
              const bool same = random_self_check(cpu::kernels_for(l), out);
              why = out.str();
              return proof::Verdict{same, same ? "" : "bytes" + why};
            },
            proof::Warn::kNever);
      }
      any = any || config.ok[level];
      info << " " << cpu::level_name(l) << "="
           << (!cpu::cpu_has_level(l) ? "unavailable"
               : config.ok[level]     ? "pass"
                                      : "FAIL")
           << why;
    }
    if (!any) {
      proof::record("cpu.random_: fast path", false,
                    "none of our kernel sets gives this torch's random_ bytes");
    }
    config.info = info.str();
  });
  return config;
}

// Our kernels for this call, or nullopt for torch's own random_.
std::optional<cpu::Kernels> choose_kernels(cpu::CpuPath path) {
  if (path == cpu::CpuPath::kExact) return std::nullopt;
  if (path != cpu::CpuPath::kAuto) return cpu::kernels_for(cpu::forced_level(path, "random_"));
  const RandomConfig& config = random_config();
  for (int level = 2; level >= 0; --level) {
    if (config.ok[level]) return cpu::kernels_for(static_cast<cpu::SimdLevel>(level));
  }
  return std::nullopt;
}

// random_fast plus the injected fault (FP8_DUMMY_FAULT=cpu.random_): what a call runs.
bool random_fast_call(const at::Tensor& self, const MemoryOrder& order, int64_t from, int64_t to,
                      at::CPUGeneratorImpl* gen, const cpu::Kernels& kernels, int threads) {
  if (!random_fast(self, order, from, to, gen, kernels, threads)) return false;
  if (proof::fault("cpu.random_")) proof::corrupt(self);
  return true;
}

// The call's branch (dtype, range, kernels, layout kind, threads, generator form) against
// torch's random_ on a probe of 2^15 - 9 elements (below TensorIterator's grain size, as
// init_'s probe: no OpenMP pool for a small first call): bytes and the generator's state.
proof::Verdict probe_random(const at::Tensor& self, bool dense, int64_t from, int64_t to,
                            const cpu::Kernels& kernels, int threads, bool generator_form) {
  constexpr int64_t kN = (int64_t{1} << 15) - 9;
  auto make = [&] {
    auto p = dense ? at::empty({kN}, self.options())
                   : at::empty({(kN + 4) / 5, 10}, self.options()).slice(1, 0, 10, 2);
    std::memset(p.storage().mutable_data(), 0x55, p.storage().nbytes());
    return p;
  };
  at::Tensor ours = make(), ref = make();
  const auto order = random_order(ours);
  if (!order) return {false, "the probe's layout has no known order"};
  auto g_ours = at::detail::createCPUGenerator(20240611);
  auto g_ref = at::detail::createCPUGenerator(20240611);
  auto* ours_impl = at::check_generator<at::CPUGeneratorImpl>(g_ours);
  auto* ref_impl = at::check_generator<at::CPUGeneratorImpl>(g_ref);
  if (generator_form) {  // a generator in use: mid-block
    for (int i = 0; i < 5; ++i) {
      ours_impl->random();
      ref_impl->random();
    }
  }
  const int probe_threads = threads > 1 ? std::min(threads, 3) : 1;
  if (!random_fast_call(ours, *order, from, to, ours_impl, kernels, probe_threads)) {
    return {false, "the probe's generator state is unusable"};
  }
  ref.random_(from, to, g_ref);
  auto verdict = proof::same_bytes(ours, ref, "bytes");
  if (verdict.passed && !cpu::same_engine(ours_impl->engine().data(), ref_impl->engine().data())) {
    verdict = {false, "the generator's state afterwards differs"};
  }
  return verdict;
}

void fill(at::Tensor& self, int64_t from, int64_t to, const at::Generator& gen,
          bool generator_form) {
  const cpu::CpuPath path = cpu::cpu_path_from_env("random_");
  const auto kernels = choose_kernels(path);
  const auto order = kernels ? random_order(self) : std::nullopt;
  auto* impl = at::check_generator<at::CPUGeneratorImpl>(gen);
  if (order) {
    const int threads = cpu::draw_threads(self.numel());
    const bool linear = order->linear();
    auto key = [&] {
      std::ostringstream out;
      out << "cpu.random_: " << self.scalar_type() << " range=[" << from << ", " << to
          << ") simd=" << cpu::level_name(kernels->level)
          << " layout=" << (linear ? "dense" : "gaps")
          << " threads=" << (threads > 1 ? "split" : "one")
          << " generator=" << (generator_form ? "given" : "seed");
      return out.str();
    };
    auto probe = [&] {
      return probe_random(self, linear, from, to, *kernels, threads, generator_form);
    };
    // The engines' two ranges are remembered by a code (proof::Memo); any other range is
    // looked up by its key's text.
    const bool engine_range = (self.scalar_type() == at::kChar && from == -128 && to == 128) ||
                              (self.scalar_type() == at::kByte && from == 0 && to == 256);
    static proof::Memo<2 * 3 * 2 * 2 * 2> memo;
    size_t code = self.scalar_type() == at::kChar ? 0 : 1;
    code = ((code * 3 + static_cast<size_t>(kernels->level)) * 2 + linear) * 2 + (threads > 1);
    code = code * 2 + generator_form;
    // Forced paths (FP8_DUMMY_CPU_PATH) skip the proof, for tests and benchmarks.
    const bool use = path != cpu::CpuPath::kAuto ||
                     (engine_range ? memo.proven(code, key, probe) : proof::proven(key(), probe));
    if (use && random_fast_call(self, *order, from, to, impl, *kernels, threads)) return;
  }
  self.random_(from, to, gen);  // torch's own kernel: the reference itself
}

void random_seed_cpu(at::Tensor& self, int64_t from, int64_t to, int64_t seed) {
  check_random_args(self, from, to);
  if (self.numel() == 0) return;  // torch draws nothing either
  // torch.Generator().manual_seed(seed): mt19937 seeded with the seed's low 32 bits.
  fill(self, from, to, at::detail::createCPUGenerator(static_cast<uint64_t>(seed)), false);
}

void random_generator_cpu(at::Tensor& self, int64_t from, int64_t to,
                          std::optional<at::Generator> gen) {
  check_random_args(self, from, to);
  const bool given = gen.has_value() && gen->defined();
  TORCH_CHECK(!given || gen->device().is_cpu(),
              "fp8_dummy.random_: expected a generator of device type 'cpu' for a CPU tensor, "
              "got one of device '",
              given ? gen->device().str() : "", "'");
  if (self.numel() == 0) return;
  fill(self, from, to, given ? *gen : at::detail::getDefaultCPUGenerator(), true);
}

std::string cpu_random_info() { return random_config().info; }

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CPU, m) {
  m.impl("random_", TORCH_FN(random_seed_cpu));
  m.impl("random_.generator", TORCH_FN(random_generator_cpu));
}

TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeExplicitAutograd, m) {
  m.impl("cpu_random_info", TORCH_FN(cpu_random_info));
}

}  // namespace fp8_dummy
