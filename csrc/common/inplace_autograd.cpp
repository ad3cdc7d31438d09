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

// The arguments the operator writes, in schema order (before the call consumes the stack).
std::vector<at::Tensor> written_tensors(const c10::OperatorHandle& op,
                                        const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  const size_t first = stack.size() - args.size();
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = args[i].alias_info();
    if (alias == nullptr || !alias->isWrite()) continue;
    const c10::IValue& value = stack[first + i];
    if (value.isTensor()) {
      out.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) out.push_back(t);
    }
  }
  return out;
}

void refuse_inference_tensors(const std::vector<at::Tensor>& tensors) {
  if (c10::InferenceMode::is_enabled()) return;
  for (const at::Tensor& t : tensors) {
    // torch's own message (c10::VariableVersion::bump), raised before the write.
    TORCH_CHECK(!t.defined() || !t.is_inference(),
                "Inplace update to inference tensor outside InferenceMode is not allowed."
                "You can make a clone to get a normal tensor before doing inplace update."
                "See https://github.com/pytorch/rfcs/pull/17 for more details.");
  }
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
  const std::vector<at::Tensor> tensors = written_tensors(op, *stack);
  refuse_inference_tensors(tensors);
  std::vector<torch::autograd::edge_list> history(tensors.size());
  std::vector<bool> tracked(tensors.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined()) continue;
    tracked[i] = torch::autograd::compute_requires_grad(t);  // grad mode on and t requires grad
    torch::autograd::check_inplace(t, tracked[i]);
    if (tracked[i]) history[i] = torch::autograd::collect_next_edges(t);
  }
  redispatch_below(op, keys, stack);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) continue;
    torch::autograd::increment_version(tensors[i]);
    if (tracked[i]) {
      torch::autograd::rebase_history(tensors[i], make_overwritten_node(std::move(history[i])));
    }
  }
}

void inplace_or_view_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                            torch::jit::Stack* stack) {
  const std::vector<at::Tensor> tensors = written_tensors(op, *stack);
  refuse_inference_tensors(tensors);
  redispatch_below(op, keys, stack);
  for (const at::Tensor& t : tensors) {
    if (t.defined()) torch::autograd::increment_version(t);
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
