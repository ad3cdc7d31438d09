// random_ on CUDA: our argument checks, then torch's own random_ (one Philox launch, already
// at memory speed for bytes: a kernel of ours would gain nothing).
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>

#include "common/random_bytes.h"

namespace fp8_dummy {
namespace {

void random_seed_cuda(at::Tensor& self, int64_t from, int64_t to, int64_t seed) {
  check_random_args(self, from, to);
  if (self.numel() == 0) return;  // torch draws nothing either
  const c10::cuda::CUDAGuard guard(self.device());
  // torch.Generator(device=self.device).manual_seed(seed): seed as uint64, offset 0.
  auto gen = at::make_generator<at::CUDAGeneratorImpl>(self.device().index());
  gen.set_current_seed(static_cast<uint64_t>(seed));
  self.random_(from, to, gen);
}

void random_generator_cuda(at::Tensor& self, int64_t from, int64_t to,
                           std::optional<at::Generator> gen) {
  check_random_args(self, from, to);
  const at::Generator g = generator_for(self, gen, "random_");
  if (self.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(self.device());
  self.random_(from, to, g);
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CUDA, m) {
  m.impl("random_", TORCH_FN(random_seed_cuda));
  m.impl("random_.generator", TORCH_FN(random_generator_cuda));
}

}  // namespace fp8_dummy
