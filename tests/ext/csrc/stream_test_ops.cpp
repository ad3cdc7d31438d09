// Test operators (schemas in test_ops.cpp) that expose the CPU stream's pieces to the
// tests and benchmarks: the per-element transform at each SIMD level, the jump-ahead, and
// the split stream on an explicit number of threads (at any size: the public ops only
// split tensors above the size where it pays).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <mutex>
#include <optional>

#include "cpu/fast_path.h"

namespace fp8_dummy {
namespace {

cpu::SimdLevel checked_level(int64_t level, const char* op) {
  TORCH_CHECK(level >= 0 && level <= 2, "fp8_dummy_test.", op,
              ": level must be 0 (portable), 1 (avx2) or 2 (avx512)");
  const auto l = static_cast<cpu::SimdLevel>(level);
  TORCH_CHECK(cpu::cpu_has_level(l), "fp8_dummy_test.", op, ": this CPU does not run ",
              cpu::level_name(l));
  return l;
}

at::Tensor cpu_transform(const at::Tensor& words, double low, double high, int64_t formula,
                         bool fma, int64_t level) {
  TORCH_CHECK(words.scalar_type() == at::kInt && words.dim() == 1,
              "fp8_dummy_test.cpu_transform: expected a 1-D int32 tensor");
  TORCH_CHECK(formula == 24 || formula == 11,
              "fp8_dummy_test.cpu_transform: formula must be 24 or 11");
  const auto kernels = cpu::kernels_for(checked_level(level, "cpu_transform"));
  const auto w = words.contiguous();
  auto out = at::empty({w.numel()}, w.options().dtype(at::kHalf));
  const auto params = cpu::make_uniform_params(
      low, high, cpu::Transform{static_cast<cpu::Formula>(formula), fma, formula == 24});
  kernels.transform(static_cast<const uint32_t*>(w.const_data_ptr()), w.numel(),
                    /*temper=*/false, params, static_cast<uint16_t*>(out.mutable_data_ptr()));
  return out;
}

// Runs f on the generator's engine state (locked), then writes the state back.
template <class F>
void with_pod(const std::optional<at::Generator>& generator, const char* op, const F& f) {
  TORCH_CHECK(generator.has_value() && generator->defined(), "fp8_dummy_test.", op,
              ": expected a generator");
  auto* gen = at::check_generator<at::CPUGeneratorImpl>(*generator);
  std::lock_guard<std::mutex> lock(gen->mutex_);
  auto pod = gen->engine().data();
  TORCH_CHECK(cpu::stream_usable(pod), "fp8_dummy_test.", op,
              ": a generator state torch's engine would misread");
  f(pod);
  at::mt19937 engine;
  engine.set_data(pod);
  gen->set_engine(engine);
}

void cpu_mt19937_jump(const std::optional<at::Generator>& generator, int64_t distance, bool avx2) {
  TORCH_CHECK(distance >= 0, "fp8_dummy_test.cpu_mt19937_jump: distance must be >= 0");
  TORCH_CHECK(!avx2 || cpu::cpu_has_level(cpu::SimdLevel::kAvx2),
              "fp8_dummy_test.cpu_mt19937_jump: this CPU does not run avx2");
  with_pod(generator, "cpu_mt19937_jump", [&](at::mt19937_data_pod& pod) {
    cpu::mt_jump(pod, static_cast<uint64_t>(distance), avx2);
  });
}

at::Tensor cpu_mt19937_words(const std::optional<at::Generator>& generator, int64_t n,
                             int64_t threads, int64_t level) {
  TORCH_CHECK(n >= 0 && threads >= 1,
              "fp8_dummy_test.cpu_mt19937_words: expected n >= 0 and threads >= 1");
  const auto kernels = cpu::kernels_for(checked_level(level, "cpu_mt19937_words"));
  auto out = at::empty({n}, at::TensorOptions().dtype(at::kInt));
  auto* dst = static_cast<uint32_t*>(out.mutable_data_ptr());
  with_pod(generator, "cpu_mt19937_words", [&](at::mt19937_data_pod& pod) {
    cpu::draw_words(pod, n, kernels.twist, kernels.level != cpu::SimdLevel::kPortable,
                    static_cast<int>(threads),
                    [&](int64_t first, const uint32_t* words, int64_t len) {
                      for (int64_t i = 0; i < len; ++i) dst[first + i] = cpu::mt_temper(words[i]);
                    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_test, CPU, m) { m.impl("cpu_transform", TORCH_FN(cpu_transform)); }

// Generator arguments only: registered for every backend (the CPU check is inside).
TORCH_LIBRARY_IMPL(fp8_dummy_test, CompositeExplicitAutograd, m) {
  m.impl("cpu_mt19937_jump", TORCH_FN(cpu_mt19937_jump));
  m.impl("cpu_mt19937_words", TORCH_FN(cpu_mt19937_words));
}

}  // namespace fp8_dummy
