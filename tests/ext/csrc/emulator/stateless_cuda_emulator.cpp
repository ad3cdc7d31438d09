// init_stateless_ as its CUDA launcher runs it (cuda/stateless_cuda.cu), emulated on the CPU:
// the kernel's per-element rule (fp8_dummy/cuda/stateless.h: global index -> Philox call ->
// value, the host-made FP8 table) where its proof key passes against the CPU kernel, through
// the same probe as on a GPU (cuda_plan/cuda_proof.h), else the CPU kernel. CPU tests show a
// broken CUDA path (FP8_DUMMY_FAULT=cuda.init_stateless_) caught and replaced. The kernel's
// own index arithmetic is checked apart, by tests/consumers/stateless_kernel_on_host.cpp.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <array>
#include <cstring>
#include <vector>

#include "common/proof.h"
#include "common/reference.h"
#include "common/stateless_plan.h"
#include "cuda_plan/cuda_proof.h"

namespace fp8_dummy {
namespace {

// Every element of self from its global index, element by element.
void emulate_rule(at::Tensor& self, double low, double high, int64_t seed, int64_t key_offset,
                  const ShardGeometry& g) {
  const auto dtype = self.scalar_type();
  const auto params = stateless_params(dtype, low, high);
  const bool fp8 = is_fp8(dtype);
  std::array<uint8_t, 2048> table{};
  if (fp8) table = stateless_fp8_table(dtype, params);
  const int64_t per = dtype == at::kDouble ? 2 : 4;
  const auto size = static_cast<int64_t>(self.element_size());
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  const auto dims = static_cast<int64_t>(g.sizes.size());
  std::vector<int64_t> idx(static_cast<size_t>(dims), 0);
  for (int64_t done = 0; done < self.numel(); ++done) {
    int64_t at = 0, e = g.element_offset;
    for (int64_t d = 0; d < dims; ++d) {
      at += idx[d] * g.self_strides[d];
      e += idx[d] * g.global_strides[d];
    }
    const auto w =
        cuda::stateless_call(static_cast<uint64_t>(seed), static_cast<uint64_t>(key_offset),
                             static_cast<uint64_t>(e / per));
    const int k = static_cast<int>(e % per);
    uint8_t* out = base + at * size;
    if (fp8) {
      *out = table[w.w[k] & 0x7ffu];
    } else if (dtype == at::kChar || dtype == at::kByte) {
      *out = cuda::stateless_byte(w.w[k], params);
    } else if (dtype == at::kHalf) {
      const uint16_t v = cuda::stateless_half(w.w[k], params);
      std::memcpy(out, &v, 2);
    } else if (dtype == at::kBFloat16) {
      const uint16_t v = cuda::stateless_bf16(w.w[k], params);
      std::memcpy(out, &v, 2);
    } else if (dtype == at::kFloat) {
      const float v = cuda::stateless_float(w.w[k], params);
      std::memcpy(out, &v, 4);
    } else {
      TORCH_CHECK(dtype == at::kDouble,
                  "fp8_dummy_test.emulate_proven_cuda_init_stateless_: ", "no rule for ", dtype);
      const double v = cuda::stateless_double(w.w[2 * k], w.w[2 * k + 1], params);
      std::memcpy(out, &v, 8);
    }
    for (int64_t d = dims - 1; d >= 0; --d) {  // row-major step of the multi-index
      if (++idx[d] < g.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

void emulate_proven_stateless(at::Tensor& self, double low, double high, int64_t seed,
                              int64_t key_offset, int64_t element_offset,
                              at::OptionalIntArrayRef element_strides, int64_t sm_count) {
  TORCH_CHECK(self.device().is_cpu(),
              "fp8_dummy_test.emulate_proven_cuda_init_stateless_: expects a CPU tensor");
  const ShardGeometry g = check_stateless_args(self, low, high, element_offset, element_strides);
  if (self.numel() == 0) return;
  const bool linear = g.sizes.size() <= 1 &&
                      (g.sizes.empty() || (g.self_strides[0] == 1 && g.global_strides[0] == 1));
  const std::string key = cuda_proof::stateless_key(
      "emulated (" + std::to_string(sm_count) + " SMs)", self.scalar_type(), linear);
  auto ours = [&](at::Tensor& t, const ShardGeometry& geometry) {
    emulate_rule(t, low, high, seed, key_offset, geometry);
    if (proof::fault("cuda.init_stateless_")) proof::corrupt(t);
  };
  const bool use = proof::proven(key, [&] {
    return cuda_proof::stateless_probe(
        self.options(), cuda_proof::probe_piece(sm_count, 2048), linear,
        [&](at::Tensor& t, int64_t offset) {
          ours(t, check_stateless_args(t, low, high, offset, std::nullopt));
        },
        [&](at::Tensor& t, int64_t offset) {
          stateless_on_cpu(t, low, high, seed, key_offset, offset, std::nullopt);
        });
  });
  if (use) {
    ours(self, g);
  } else {
    stateless_on_cpu(self, low, high, seed, key_offset, element_offset, element_strides);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_test, CPU, m) {
  m.impl("emulate_proven_cuda_init_stateless_", TORCH_FN(emulate_proven_stateless));
}

}  // namespace fp8_dummy
