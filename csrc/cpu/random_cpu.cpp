// random_ on the CPU for int8/uint8: our parallel stream with random_'s byte where
// TensorIterator's order is shown (common/random_bytes.h) and the key is proven; else torch's.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <sstream>
#include <string>

#include "common/proof.h"
#include "common/random_bytes.h"
#include "cpu/fast_path.h"

namespace fp8_dummy {
namespace {

// self from gen's stream at the kernels' level; false, having drawn nothing, when the state
// must go to torch's kernel.
bool random_fast(const at::Tensor& self, const MemoryOrder& order, int64_t from, int64_t to,
                 const at::Generator& gen, const cpu::Kernels& k, int threads) {
  const cpu::ByteParams params{static_cast<uint32_t>(to - from), static_cast<int32_t>(from)};
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  auto* g = at::check_generator<at::CPUGeneratorImpl>(gen);
  const bool linear = order.linear();
  return cpu::draw(g, self.numel(), k, threads, [&](int64_t first, const uint32_t* w, int64_t len) {
    if (linear) return k.bytes(w, len, params, base + first);
    uint8_t bytes[cpu::kMtN];
    k.bytes(w, len, params, bytes);
    scatter_bytes(order, base, first, bytes, len);
  });
}

// What a call (and its probe) runs: random_fast, and FP8_DUMMY_FAULT=cpu.random_'s byte.
bool random_call(const at::Tensor& self, const MemoryOrder& order, int64_t from, int64_t to,
                 const at::Generator& gen, const cpu::Kernels& k, int threads) {
  if (!random_fast(self, order, from, to, gen, k, threads)) return false;
  if (proof::fault("cpu.random_")) proof::corrupt(self);
  return true;
}

// A few ranges (power of two or not), from mid-block, on 1 and 3 threads, 2^15 + 7 elements.
proof::Verdict check_bytes(const cpu::Kernels& k) {
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
    auto v = cpu::against_torch(
        [&] { return at::empty({kN}, at::TensorOptions().dtype(c.dtype)); }, 20240611, 5,
        [&](at::Tensor& t, at::Generator& g) {
          return random_fast(t, memory_order(t), c.from, c.to, g, k, c.threads);
        },
        [&](at::Tensor& t, at::Generator& g) { t.random_(c.from, c.to, g); },
        "bytes for [" + std::to_string(c.from) + ", " + std::to_string(c.to) + ")");
    if (!v.passed) return v;
  }
  return {true, ""};
}

// One silent key per level; none passing is a refusal of the fast path itself, which warns.
cpu::FastConfig search_levels() {
  cpu::FastConfig config;
  std::ostringstream info;
  info << "random_:";
  for (int level = 2; level >= 0; --level) {
    const auto l = static_cast<cpu::SimdLevel>(level);
    std::string why;
    if (cpu::cpu_has_level(l)) {
      const auto state = proof::verdict(
          proof::key("cpu.random_", {std::string("kernels simd=") + cpu::level_name(l)}),
          [&] {
            auto v = check_bytes(cpu::kernels_for(l));
            if (!v.passed) why = " (" + v.detail + ")";
            return v;
          },
          proof::Warn::kNever);
      if (state == proof::State::kUnproven) {
        cpu::FastConfig pending;
        pending.complete = false;
        pending.info = "random_: not configured yet (a probe failed for lack of memory)";
        return pending;
      }
      config.ok[level] = state == proof::State::kProven;
    }
    config.found = config.found || config.ok[level];
    info << " " << cpu::level_name(l) << "="
         << (!cpu::cpu_has_level(l) ? "unavailable"
             : config.ok[level]     ? "pass"
                                    : "FAIL")
         << why;
  }
  if (!config.found) {
    proof::record("cpu.random_: fast path", proof::State::kRefused,
                  "none of our kernel sets gives this torch's random_ bytes");
  }
  config.info = info.str();
  return config;
}

const cpu::FastConfig& random_config() {
  static std::atomic<const cpu::FastConfig*> done{nullptr};
  static std::mutex mutex;
  return cpu::settled(done, mutex, &search_levels);
}

// The call's branch against torch's random_ on 2^15 - 9 elements (below TensorIterator's
// grain) of the call's layout kind: bytes and the generator's state.
proof::Verdict probe_random(const at::Tensor& self, bool dense, int64_t from, int64_t to,
                            const cpu::Kernels& k, int threads, bool generator_form) {
  constexpr int64_t kN = (int64_t{1} << 15) - 9;
  const auto layout = dense ? proof::Layout::kDense : proof::Layout::kGaps;
  auto make = [&] { return proof::make_probe(self.options(), kN, layout); };
  return cpu::against_torch(
      make, 20240611, generator_form ? 5 : 0,
      [&](at::Tensor& t, at::Generator& g) {
        return random_call(t, *random_order(t), from, to, g, k, std::min(threads, 3));
      },
      [&](at::Tensor& t, at::Generator& g) { t.random_(from, to, g); }, "bytes");
}

void fill(at::Tensor& self, int64_t from, int64_t to, const at::Generator& gen,
          bool generator_form) {
  const auto level = cpu::fast_level("random_", &random_config);
  const auto order = level ? random_order(self) : std::nullopt;
  if (order) {
    const cpu::Kernels k = cpu::kernels_for(*level);
    const int threads = cpu::draw_threads(self.numel());
    const bool linear = order->linear();
    const std::string key = proof::key(
        "cpu.random_",
        {c10::toString(self.scalar_type()),
         "range=[" + std::to_string(from) + ", " + std::to_string(to) + ")",
         std::string("simd=") + cpu::level_name(*level), linear ? "layout=dense" : "layout=gaps",
         threads > 1 ? "threads=split" : "threads=one",
         generator_form ? "generator=given" : "generator=seed"});
    if (proof::proven(
            key,
            [&] { return probe_random(self, linear, from, to, k, threads, generator_form); }) &&
        random_call(self, *order, from, to, gen, k, threads)) {
      return;
    }
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
  const at::Generator g = generator_for(self, gen, "random_");
  if (self.numel() > 0) fill(self, from, to, g, true);
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
