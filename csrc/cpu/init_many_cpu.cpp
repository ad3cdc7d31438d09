// init_many_ on the CPU: a loop over init_ (the CPU path has no launches to save), every
// tensor's arguments checked before the first is written.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "common/init_many_plan.h"

namespace fp8_dummy {
namespace {

void init_many_cpu(at::TensorList tensors, double low, double high, int64_t seed,
                   bool contiguous_temp) {
  check_init_many_args(tensors, low, high);
  for (const auto& t : tensors) {
    if (t.numel() > 0) init_one(t, low, high, seed, contiguous_temp);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CPU, m) { m.impl("init_many_", TORCH_FN(init_many_cpu)); }

}  // namespace fp8_dummy
