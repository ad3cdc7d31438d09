// Autograd and ADInplaceOrView kernels of every operator that writes a tensor, as torch's
// in-place operators: version counter, leaf and inference-tensor refusals before the write, a
// zero-gradient history. One boxed kernel: the written arguments are the schema's (a!).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace fp8_dummy {
namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

// The arguments the operator writes, in schema order: the stack's own tensors, whose values
// and lists `held` keeps alive after the call consumes the stack (no handle copied per
// tensor: a list of 100,000 is that many trips to memory, and back to release them).
struct Written {
  std::vector<c10::IValue> held;  // a tensor or a tensor list each: a handle, not a copy
  std::vector<const at::Tensor*> tensors;
};

Written written_tensors(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  const size_t first = stack.size() - args.size();
  Written out;
  out.held.reserve(args.size());  // never moved: `tensors` points into its tensors' values
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = args[i].alias_info();
    if (alias == nullptr || !alias->isWrite()) continue;
    const c10::IValue& value = stack[first + i];
    if (value.isTensor()) {
      out.tensors.push_back(&out.held.emplace_back(value).toTensor());
    } else if (value.isTensorList()) {
      for (const c10::IValue& t : out.held.emplace_back(value).toListRef()) {
        out.tensors.push_back(&t.toTensor());
      }
    }
  }
  return out;
}

// torch's own message (c10::VariableVersion::bump), raised before the write.
void refuse_inference_tensor(const at::Tensor& t) {
  TORCH_CHECK(!t.is_inference(),
              "Inplace update to inference tensor outside InferenceMode is not allowed."
              "You can make a clone to get a normal tensor before doing inplace update."
              "See https://github.com/pytorch/rfcs/pull/17 for more details.");
}

// d(new values)/d(old values) is zero: the new values do not depend on the old ones.
struct OverwrittenBackward final : Node {
  using Node::Node;
  variable_list apply(variable_list&& grads) override {
    variable_list out(num_outputs());
    if (should_compute_output(0) && grads[0].defined()) out[0] = at::zeros_like(grads[0]);
    return out;
  }
  std::string name() const override { return "fp8_dummy::OverwrittenBackward"; }
};

// Nodes are held by std::shared_ptr up to torch 2.12 and by c10::intrusive_ptr from 2.13.
auto make_overwritten_node(torch::autograd::edge_list&& next) {
  using Ptr = decltype(torch::autograd::Edge::function);
  if constexpr (std::is_same_v<Ptr, std::shared_ptr<Node>>) {
    return std::make_shared<OverwrittenBackward>(std::move(next));
  } else {
    return c10::make_intrusive<OverwrittenBackward>(std::move(next));
  }
}

void redispatch_below(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                      torch::jit::Stack* stack) {
  const at::AutoDispatchBelowADInplaceOrView guard;
  op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
}

void autograd_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack) {
  const Written written = written_tensors(op, *stack);
  const auto& tensors = written.tensors;
  const bool inference_mode = c10::InferenceMode::is_enabled();
  std::vector<torch::autograd::edge_list> history;
  std::vector<size_t> tracked;  // the tensors whose history the write rebases
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = *tensors[i];
    if (!t.defined()) continue;
    if (!inference_mode) refuse_inference_tensor(t);
    const bool grad = torch::autograd::compute_requires_grad(t);  // grad mode on, t requires it
    torch::autograd::check_inplace(t, grad);
    if (grad) {
      tracked.push_back(i);
      history.push_back(torch::autograd::collect_next_edges(t));
    }
  }
  redispatch_below(op, keys, stack);
  for (const at::Tensor* t : tensors) {
    if (t->defined()) torch::autograd::increment_version(*t);
  }
  for (size_t j = 0; j < tracked.size(); ++j) {
    torch::autograd::rebase_history(*tensors[tracked[j]],
                                    make_overwritten_node(std::move(history[j])));
  }
}

void inplace_or_view_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                            torch::jit::Stack* stack) {
  const Written written = written_tensors(op, *stack);
  if (!c10::InferenceMode::is_enabled()) {
    for (const at::Tensor* t : written.tensors) {
      if (t->defined()) refuse_inference_tensor(*t);
    }
  }
  redispatch_below(op, keys, stack);
  for (const at::Tensor* t : written.tensors) {
    if (t->defined()) torch::autograd::increment_version(*t);
  }
}

// Every public operator that writes into a tensor argument.
constexpr const char* kMutatingOps[] = {"init_",           "init_.generator", "init_many_",
                                        "init_stateless_", "random_",         "random_.generator"};

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, Autograd, m) {
  for (const char* name : kMutatingOps) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autograd_kernel>());
  }
}

TORCH_LIBRARY_IMPL(fp8_dummy, ADInplaceOrView, m) {
  for (const char* name : kMutatingOps) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&inplace_or_view_kernel>());
  }
}

}  // namespace fp8_dummy
