// The build's line, plain bytes that fp8_dummy/_build.py reads where the library cannot
// load; and, without CUDA, CUDA kernels that say so. A release wheel's host library
// (FP8_DUMMY_CUDA_SEPARATE) has neither CUDA code nor those kernels: its CUDA kernels are a
// library of their own, loaded after it where torch is a CUDA build (fp8_dummy/_library.py).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/version.h>

#include <string>

#define FP8_DUMMY_TORCH_VERSION      \
  C10_STRINGIZE(TORCH_VERSION_MAJOR) \
  "." C10_STRINGIZE(TORCH_VERSION_MINOR) "." C10_STRINGIZE(TORCH_VERSION_PATCH)
#if defined(FP8_DUMMY_WITH_CUDA)
#define FP8_DUMMY_BUILT_WITH_CUDA "yes"
#elif defined(FP8_DUMMY_CUDA_SEPARATE)
#define FP8_DUMMY_BUILT_WITH_CUDA "separate"
#else
#define FP8_DUMMY_BUILT_WITH_CUDA "no"
#endif

// "fp8_dummy-build-info: torch=2.13.0 cuda=no" (or yes, separate): the torch whose headers it
// was compiled with.
extern "C" __attribute__((used)) const char fp8_dummy_build_info[] =
    "fp8_dummy-build-info: torch=" FP8_DUMMY_TORCH_VERSION " cuda=" FP8_DUMMY_BUILT_WITH_CUDA;

namespace fp8_dummy {
namespace {

std::string build_info() { return fp8_dummy_build_info + sizeof("fp8_dummy-build-info: ") - 1; }

#if !defined(FP8_DUMMY_WITH_CUDA) && !defined(FP8_DUMMY_CUDA_SEPARATE)
// Instead of the dispatcher's "Could not run ... from the 'CUDA' backend", which says not why.
void no_cuda_kernel(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  std::string name = op.schema().name();  // "fp8_dummy::init_"
  name.replace(name.find("::"), 2, ".");
  TORCH_CHECK(false, name,
              ": this fp8_dummy was built without CUDA (against torch " FP8_DUMMY_TORCH_VERSION
              ": a CPU build of torch, no CUDA toolkit found, or FP8_DUMMY_CUDA=0), so it has no "
              "CUDA kernels. Rebuild it with the CUDA toolkit: from its source directory, "
              "CUDA_HOME=/usr/local/cuda FP8_DUMMY_CUDA=1 pip install --force-reinstall "
              "--no-deps . (an editable install: pip install --no-build-isolation -e .)");
}
#endif

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeExplicitAutograd, m) {
  m.impl("build_info", TORCH_FN(build_info));
}

#if !defined(FP8_DUMMY_WITH_CUDA) && !defined(FP8_DUMMY_CUDA_SEPARATE)
TORCH_LIBRARY_IMPL(fp8_dummy, CUDA, m) {
  for (const char* name : {"init_", "init_.generator", "init_many_", "init_stateless_", "random_",
                           "random_.generator"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&no_cuda_kernel>());
  }
}
#endif

}  // namespace fp8_dummy
