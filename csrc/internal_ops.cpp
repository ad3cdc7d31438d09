// The one place where fp8_dummy's internal operators are defined, in their own
// namespace (torch.ops.fp8_dummy_internal) so that torch.ops.fp8_dummy shows users only
// what they call (ops.cpp): only what the product calls (fake kernels' checks, the proof,
// the build, diagnostics); test-only ones are in tests/ext/. Their schemas may change
// between releases. Kernels live beside the code they expose (csrc/README.md).
#include <torch/library.h>

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
  // ---- Argument checks (common/reference.cpp).
  // The checks of init_ alone: used by the fake kernels (fp8_dummy/ops.py) and the DTensor
  // rules, touches no data. Messages start with `op` ("fp8_dummy.init_many_": the caller's
  // name) and, for index >= 0, the tensor's place in a list ("tensors[3]").
  m.def(
      "check_init_args(Tensor self, float low, float high, str op=\"fp8_dummy.init_\", "
      "int index=-1) -> ()");
  m.impl("check_init_args", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(check_init_args_op));
  // The checks of random_ alone (common/random_bytes.cpp), likewise.
  m.def("check_random_args(Tensor self, int low, int high) -> ()");
  m.impl("check_random_args", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(check_random_args_op));

  // The checks of init_stateless_ alone (common/stateless.cpp), likewise; also with
  // symbolic shapes.
  m.def(
      "check_stateless_args(Tensor self, float low, float high, int element_offset, "
      "int[]? element_strides) -> ()");

  // ---- The proof mechanism (common/proof.cpp): every key needed in this process, as
  // [key, "proven" | "refused" | "unproven", detail, ...] (fp8_dummy.self_check_report());
  // a key's verdict (-1 none yet, 0 refused, 1 proven); a verdict reached in Python (the
  // engine integrations; retry: the probe failed for lack of memory), which warns once on a
  // refusal and returns whether the key is proven; whether FP8_DUMMY_FAULT names a path.
  m.def("proof_report() -> str[]");
  m.def("proof_lookup(str key) -> int");
  m.def("proof_record(str key, bool passed, str detail, bool retry=False) -> bool");
  m.def("proof_fault(str path) -> bool");
  // Tests only: forget the keys starting with `prefix` (they are probed again); returns
  // how many.
  m.def("proof_forget(str prefix) -> int");
  // ---- The build (build_info.cpp): "torch=2.13.0 cuda=no", the torch whose headers the
  // library was compiled with and whether it has CUDA kernels.
  m.def("build_info() -> str");

  // ---- Diagnostics: how the CPU fast path was configured in this process (torch version's
  // formula, FMA, self-check results per SIMD level), one line (fp8_dummy.cpu_fast_path_info()).
  m.def("cpu_fast_path_info() -> str");
  // The same for random_'s CPU path: which SIMD levels matched torch's random_.
  m.def("cpu_random_info() -> str");
}

}  // namespace fp8_dummy
