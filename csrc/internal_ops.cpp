// The internal operators (torch.ops.fp8_dummy_internal), apart so that torch.ops.fp8_dummy
// shows users only theirs: what the product calls (fake kernels' checks, the proof, the
// build, diagnostics; test-only ones: tests/ext/). Schemas may change between releases.
#include <torch/library.h>

#include "common/held_tensors.h"
#include "common/random_bytes.h"
#include "common/reference.h"

namespace fp8_dummy {
namespace {

void check_init_args_op(const at::Tensor& self, double low, double high, c10::string_view op,
                        int64_t index) {
  check_init_args(self, low, high, OpName{op, index});
}

void check_random_args_op(const at::Tensor& self, int64_t from, int64_t to) {
  check_random_args(self, from, to);
}

}  // namespace

TORCH_LIBRARY(fp8_dummy_internal, m) {
  // The checks of init_, random_ and init_stateless_ alone (the fake kernels, the DTensor
  // rules; no data touched), messages prefixed by `op` and a list index ("tensors[3]").
  m.def(
      "check_init_args(Tensor self, float low, float high, str op=\"fp8_dummy.init_\", "
      "int index=-1) -> ()");
  m.impl("check_init_args", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(check_init_args_op));
  m.def("check_random_args(Tensor self, int low, int high) -> ()");
  m.impl("check_random_args", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(check_random_args_op));
  m.def(
      "check_stateless_args(Tensor self, float low, float high, int element_offset, "
      "int[]? element_strides) -> ()");

  // The proof (common/proof.cpp): the report ([key, "proven" | "refused" | "unproven",
  // detail, ...]); a key's verdict (-1 none yet, 0 refused, 1 proven); a verdict reached in
  // Python (retry: no verdict, lack of memory), returning whether the key is proven; whether
  // FP8_DUMMY_FAULT names a path; tests only: forget keys by prefix (probed again); a number
  // that changes with every verdict recorded from Python or forgotten (a kept plan of the
  // engines is made again).
  m.def("proof_report() -> str[]");
  m.def("proof_lookup(str key) -> int");
  m.def("proof_record(str key, bool passed, str detail, bool retry=False) -> bool");
  m.def("proof_fault(str path) -> bool");
  m.def("proof_forget(str prefix) -> int");
  m.def("proof_generation() -> int");
  // The engines' whole-model plan (common/model_facts.cpp): each tensor's kind, numbered,
  // then the facts a kept plan is checked against (and whether they still hold); the
  // entries a fill runs ([index,
  // in_order, ...]) given each entry's action and flag (1: a storage of its own, 2: filled
  // as often as listed).
  m.def("tensor_kinds(Tensor[] tensors) -> Tensor");
  m.def("facts_match(Tensor[] tensors, Tensor kinds) -> bool");
  m.def("fill_order(Tensor[] tensors, int[] actions, int[] flags) -> int[]");
  // A kept plan's fill in one call: facts_match, and where every fact holds (true),
  // fp8_dummy::init_many_ on the tensors `fill` names (their indices, ascending); false:
  // nothing written. The list is read once (CompositeImplicitAutograd: init_many_ inside
  // makes the in-place checks, version counters and autograd as ever).
  m.def(
      "init_many_kept(Tensor(a!)[] tensors, Tensor kinds, int[] fill, float low, float high, "
      "int seed, bool contiguous_temp) -> bool");
  // A new plan's two calls with the list turned into an argument once: tensor_kinds, and
  // the list held (no handle copied) until init_many_held fills the tensors `fill` names
  // (int64, ascending; None: all) through fp8_dummy::init_many_ (its checks, version
  // counters, autograd). Eager only: the writes are init_many_'s, which no schema here shows.
  m.class_<HeldTensors>("HeldTensors");
  m.def(
      "tensor_kinds_held(Tensor[] tensors) -> "
      "(Tensor, __torch__.torch.classes.fp8_dummy_internal.HeldTensors)");
  m.def(
      "init_many_held(__torch__.torch.classes.fp8_dummy_internal.HeldTensors held, Tensor? fill, "
      "float low, float high, int seed, bool contiguous_temp) -> ()");
  // The build (build_info.cpp): "torch=2.13.0 cuda=no", the torch it was compiled against.
  m.def("build_info() -> str");

  // Diagnostics: how the CPU fast paths of init_ and random_ were configured, one line each.
  m.def("cpu_fast_path_info() -> str");
  m.def("cpu_random_info() -> str");
}

}  // namespace fp8_dummy
