// See cpu/fast_path.h. init_'s transform is found by evidence: the candidates torch has used
// (the one its version suggests first), each level's kernels against torch's uniform_.
#include "cpu/fast_path.h"

#include <ATen/Version.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <torch/version.h>

#include <atomic>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace fp8_dummy {
namespace cpu {
namespace {

std::string describe(const Transform& t) {
  std::ostringstream out;
  out << "formula=" << static_cast<int>(t.formula) << " fma=" << t.fma << " clamp=" << t.clamp;
  return out.str();
}

// One kernel set against torch's uniform_ on 2^16 + 11 elements ([-500, 500]: FMA shows;
// [0, 1]: the clamp; +-1e-3: subnormals).
proof::Verdict check_transform(const Kernels& k, const Transform& t) {
  constexpr int64_t kN = (int64_t{1} << 16) + 11;
  const double bounds[][2] = {{-500.0, 500.0}, {0.0, 1.0}, {-1e-3, 1e-3}, {-3.0, 60000.0}};
  int threads = 0;
  for (const auto& b : bounds) {
    threads = threads % 3 + 1;  // 1, 2, 3, 1: the split at any size when told to
    const UniformParams params = make_uniform_params(b[0], b[1], t);
    std::ostringstream what;
    what << "float16 stream at [" << b[0] << ", " << b[1] << "]";
    auto v = against_torch(
        [] { return at::empty({kN}, at::TensorOptions().dtype(at::kHalf)); }, 20240607, 7,
        [&](at::Tensor& out, at::Generator& g) {
          auto* dst = static_cast<uint16_t*>(out.mutable_data_ptr());
          return draw(at::check_generator<at::CPUGeneratorImpl>(g), kN, k, threads,
                      [&](int64_t first, const uint32_t* words, int64_t len) {
                        k.transform(words, len, /*temper=*/true, params, dst + first);
                      });
        },
        [&](at::Tensor& out, at::Generator& g) { out.uniform_(b[0], b[1], g); }, what.str());
    if (!v.passed) return v;
  }
  return {true, ""};
}

std::vector<Transform> candidates(bool default_capability) {
#ifdef FP8_DUMMY_X86
  const bool fma_guess = !default_capability;  // torch's DEFAULT kernel has no FMA
#else
  (void)default_capability;
  const bool fma_guess = true;  // GCC and Clang contract a * b + c where FMA exists
#endif
  const Transform bits11{Formula::kBits11, false, false};
  const bool old = TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR <= 11;
  std::vector<Transform> out;
  if (old) out.push_back(bits11);
  for (const bool clamp : {true, false}) {
    for (const bool fma : {fma_guess, !fma_guess}) out.push_back({Formula::kBits24, fma, clamp});
  }
  if (!old) out.push_back(bits11);
  return out;
}

FastConfig search_transform() {
  FastConfig config;
  std::ostringstream info;
  const std::string capability = at::get_cpu_capability();
  const bool known = TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9 &&
                     TORCH_VERSION_MINOR <= 15;  // read (docs/contract.md R4) and found
  info << "torch=" << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR
       << (known ? "" : "(not seen before)") << " capability=" << capability;
  const auto tried = candidates(capability == "DEFAULT");
  std::string why[3];
  for (const Transform& t : tried) {
    for (int level = 2; level >= 0; --level) {
      const auto l = static_cast<SimdLevel>(level);
      why[level].clear();
      if (!cpu_has_level(l)) {
        config.ok[level] = false;
        continue;
      }
      const auto state = proof::verdict(
          proof::key("cpu.uniform_", {describe(t), std::string("simd=") + level_name(l)}),
          [&] {
            auto v = check_transform(kernels_for(l), t);
            if (!v.passed) why[level] = " (" + v.detail + ")";
            return v;
          },
          proof::Warn::kNever);
      if (state == proof::State::kUnproven) {
        config = FastConfig{};
        config.complete = false;
        config.info = info.str() + " fast path off until its search completes (a probe failed " +
                      "for lack of memory; see fp8_dummy.self_check_report())";
        return config;
      }
      config.ok[level] = state == proof::State::kProven;
      config.found = config.found || config.ok[level];
    }
    if (config.found) {
      config.transform = t;
      break;
    }
  }
  if (!config.found) {
    info << " fast path off: none of the " << tried.size()
         << " known transforms gives torch's uniform_ bytes (first: " << describe(tried.front())
         << why[2] << why[1] << why[0] << ")";
    config.info = info.str();
    proof::record("cpu.init_: fast path, capability=" + capability, proof::State::kRefused,
                  "none of the known uniform_ transforms gives this torch's bytes");
    return config;
  }
  info << " " << describe(config.transform)
       << (describe(config.transform) == describe(tried.front())
               ? ""
               : " (not the one this version suggests)");
  for (int level = 2; level >= 0; --level) {
    const auto l = static_cast<SimdLevel>(level);
    info << " " << level_name(l) << "="
         << (!cpu_has_level(l)  ? "unavailable"
             : config.ok[level] ? "pass"
                                : "FAIL")
         << why[level];
  }
  config.info = info.str();
  return config;
}

std::string cpu_fast_path_info() { return fast_config().info; }

}  // namespace

const FastConfig& settled(std::atomic<const FastConfig*>& done, std::mutex& mutex,
                          FastConfig (*search)()) {
  if (const FastConfig* c = done.load(std::memory_order_acquire)) return *c;
  std::lock_guard<std::mutex> lock(mutex);
  if (const FastConfig* c = done.load(std::memory_order_acquire)) return *c;
  thread_local FastConfig pending;
  pending = search();
  if (!pending.complete) return pending;
  done.store(new FastConfig(pending), std::memory_order_release);  // kept for the process
  return *done.load(std::memory_order_acquire);
}

const FastConfig& fast_config() {
  static std::atomic<const FastConfig*> done{nullptr};
  static std::mutex mutex;
  return settled(done, mutex, &search_transform);
}

std::optional<SimdLevel> fast_level(const char* op, const FastConfig& (*config)()) {
  const char* env = std::getenv("FP8_DUMMY_CPU_PATH");
  const std::string value = env ? env : "";
  if (value == "exact") return std::nullopt;
  const FastConfig& c = config();
  if (!c.complete) return std::nullopt;
  if (value.empty() || value == "auto") {
    for (int level = 2; level >= 0; --level) {
      if (c.ok[level]) return static_cast<SimdLevel>(level);
    }
    return std::nullopt;
  }
  SimdLevel level = widest_level();
  if (value == "avx512" || value == "avx2" || value == "portable") {
    level = value == "avx512" ? SimdLevel::kAvx512
            : value == "avx2" ? SimdLevel::kAvx2
                              : SimdLevel::kPortable;
  } else {
    TORCH_CHECK(value == "fast", "fp8_dummy.", op,
                ": FP8_DUMMY_CPU_PATH must be one of auto, exact, fast, avx512, avx2, portable; "
                "got '",
                value, "'");
  }
  TORCH_CHECK(cpu_has_level(level), "fp8_dummy.", op, ": FP8_DUMMY_CPU_PATH=", level_name(level),
              ": this CPU does not run it (",
              level == SimdLevel::kAvx512 ? "needs AVX512F, AVX2, FMA and F16C"
                                          : "needs AVX2, FMA and F16C",
              ")");
  return level;
}

proof::Verdict against_torch(const std::function<at::Tensor()>& make, uint64_t seed, int skip,
                             const std::function<bool(at::Tensor&, at::Generator&)>& ours,
                             const std::function<void(at::Tensor&, at::Generator&)>& torch_fill,
                             const std::string& what) {
  at::Tensor a = make(), b = make();
  at::Generator ga = at::detail::createCPUGenerator(seed),
                gb = at::detail::createCPUGenerator(seed);
  auto* ia = at::check_generator<at::CPUGeneratorImpl>(ga);
  auto* ib = at::check_generator<at::CPUGeneratorImpl>(gb);
  for (int i = 0; i < skip; ++i) {
    ia->random();
    ib->random();
  }
  if (!ours(a, ga)) return {false, "our path refused the generator's state"};
  torch_fill(b, gb);
  auto verdict = proof::same_bytes(a, b, what);
  if (verdict.passed && !same_engine(ia->engine().data(), ib->engine().data())) {
    verdict = {false, "the generator's state afterwards differs"};
  }
  return verdict;
}

}  // namespace cpu

TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeExplicitAutograd, m) {
  m.impl("cpu_fast_path_info", TORCH_FN(cpu::cpu_fast_path_info));
}

}  // namespace fp8_dummy
