// A list of tensors held on the C++ side between two calls of the engines' whole-model plan
// (fp8_dummy_internal.tensor_kinds_held, then init_many_held): a new plan reads each tensor's
// facts and later fills its batch, and torch turns a Python list into an operator's argument at
// each call (a pass over every tensor object: a third of such a plan's host cost at 100,000
// tensors). The plan holds it only until its fill; nothing keeps it.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

namespace fp8_dummy {

struct HeldTensors : torch::CustomClassHolder {
  explicit HeldTensors(c10::List<at::Tensor> held) : tensors(std::move(held)) {}
  c10::List<at::Tensor> tensors;
};

}  // namespace fp8_dummy
