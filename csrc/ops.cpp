// The one place where fp8_dummy's operators are defined. Device kernels live in
// init_cpu.cpp and cuda/init_cuda.cu; the fake (Meta) kernel in fp8_dummy/ops.py
// calls _check_init_args so trace-time errors are the same as run-time ones.
//
// setup.py builds this library as the Python module fp8_dummy._C and defines
// FP8_DUMMY_PYTHON_MODULE; the CMake build (CMakeLists.txt) builds the same library
// for libtorch-only C++ users without the module stub, so without Python's headers.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks
#endif
#include <torch/library.h>

#include "common.h"

#ifdef FP8_DUMMY_PYTHON_MODULE
extern "C" {
// Importing fp8_dummy._C loads this library, which registers the operators below.
// No Python API is used beyond this, which keeps the extension abi3-compatible.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}
#endif  // FP8_DUMMY_PYTHON_MODULE

namespace fp8_dummy {
namespace {

void check_init_args_op(const at::Tensor& self, double low, double high) {
  check_init_args(self, low, high);
}

}  // namespace

TORCH_LIBRARY(fp8_dummy, m) {
  // Where the fake kernels live: torch imports it when it needs them.
  m.set_python_module("fp8_dummy.ops");
  // Fills `self` in place with the bytes of torch's reference path
  //   t = empty_like(self, float16); t.uniform_(low, high, generator=g); self.copy_(t)
  // (self.uniform_(...) for float16 and wider), g a fresh generator of self's device
  // seeded with `seed`. Returns nothing: mutated inputs are not returned, which is
  // what lets torch.compile functionalize the op.
  m.def("init_(Tensor(a!) self, float low=-0.001, float high=0.001, int seed=1234) -> ()");
  // The same with a caller's generator (None: the device's default generator), which
  // is advanced exactly as the reference advances it.
  m.def("init_.generator(Tensor(a!) self, float low, float high, *, Generator? generator) -> ()");
  // Every tensor of the list gets the bytes init_(t, low, high, seed) would give it (each
  // its own fresh generator). On CUDA the FP8 tensors are filled by one launch per
  // (device, dtype); tensors that share bytes with another of the list are filled one
  // by one in list order, after the others, so the last one wins as in a loop.
  m.def(
      "init_many_(Tensor(a!)[] tensors, float low=-0.001, float high=0.001, int seed=1234) -> "
      "()");
  // The argument checks alone: used by the fake kernel, touches no data.
  m.def("_check_init_args(Tensor self, float low, float high) -> ()");
  m.impl("_check_init_args", c10::DispatchKey::CompositeExplicitAutograd,
         TORCH_FN(check_init_args_op));
  // Tests only (CPU, init_cpu.cpp): torch's float16 uniform_ transform of the given 32-bit
  // generator outputs (int32 tensor, bit patterns), for formula 24 (torch >= 2.12) or 11
  // (torch <= 2.11), with or without FMA, through the AVX2 (simd) or portable kernel.
  // Returns the float16 values.
  m.def(
      "_cpu_transform_test(Tensor words, float low, float high, int formula, bool fma, "
      "bool simd) -> Tensor");
  // Tests and diagnostics: how the CPU fast path was configured in this process (torch
  // version's formula, FMA, self-check results), one line.
  m.def("_cpu_fast_path_info() -> str");

  // ---- Device-independent mode (stateless_cpu.cpp, cuda/stateless_cuda.cu). The element
  // of self at multi-index idx takes the value that
  //   torch.func._random.uniform_(key, t, low=low, high=high), key = (seed, key_offset),
  // gives element e = element_offset + sum(idx[d] * element_strides[d]) of a contiguous
  // tensor t (float16 for FP8 self, then converted as copy_ does; self's dtype otherwise).
  // element_strides defaults to the row-major strides of self's shape (e = the logical
  // index); a shard of a global tensor passes its offset and the global tensor's strides.
  // The bytes depend only on (seed, key_offset, e, bounds, dtype): not on the device, the
  // thread count or the sharding.
  m.def(
      "init_stateless_(Tensor(a!) self, float low=-0.001, float high=0.001, int seed=1234, "
      "*, int key_offset=0, int element_offset=0, int[]? element_strides=None) -> ()");

  // ---- CUDA semantics on the CPU (cuda_emulator.cpp), for CPU-only CI and GPU tests.
  // Writes into the CPU tensor `self` the bytes torch's CUDA reference path would write
  // on a GPU with `sm_count` SMs and `max_threads_per_sm` threads per SM, for a
  // generator at (seed, offset); returns the generator offset afterwards. FP8 and
  // float16 only; saturate_e4m3fn picks how float8_e4m3fn treats values above 448.
  m.def(
      "emulate_cuda_init_(Tensor(a!) self, float low, float high, int seed, int offset, "
      "int sm_count, int max_threads_per_sm, bool saturate_e4m3fn=True) -> int");
  // init_many_ as the CUDA kernel runs it, on CPU tensors: the batched tensors through the
  // kernel's own work table, lookup and per-item code, simulated block by block on a
  // GPU of `sm_count` SMs (`grid` blocks; 0: the kernel's own choice), the others
  // through emulate_cuda_init_ (offset 0). Checks that every work item is visited once.
  // Returns the number of batched launches.
  m.def(
      "emulate_cuda_init_many_(Tensor(a!)[] tensors, float low, float high, int seed, "
      "int sm_count, int max_threads_per_sm, bool saturate_e4m3fn=True, int grid=0) -> int");
  // The batched kernel's work table for tensors of these sizes (allocates nothing): [tiles,
  // then per piece: tensor, start, count, threads, steps, offset, first tile].
  m.def("_cuda_batch_table(int[] numels, int sm_count, int max_threads_per_sm) -> int[]");
  // The reference's CUDA launches for n float16 elements: [offset after, then per
  // launch: start, count, threads, steps, offset used]. Allocates nothing, so the
  // split of more than 2^30 elements can be tested anywhere.
  m.def("_cuda_launch_plan(int numel, int sm_count, int max_threads_per_sm, int offset) -> int[]");
  // Our float16 -> FP8 conversion of all 65536 float16 bit patterns (uint8 tensor).
  m.def("_fp8_convert_table(ScalarType dtype, bool saturate_e4m3fn) -> Tensor");
  // The logic of the CUDA kernel's one-time probe, given torch's copy_ of all float16
  // bit patterns (`table`): [mode (0 saturate, 1 NaN on overflow, -1 none), whether
  // `hw_table` (our hardware conversion's bytes) may stand in for it (0/1)].
  m.def("_pick_fp8_mode(Tensor table, ScalarType dtype, Tensor? hw_table=None) -> int[]");
  // Philox4x32-10 of one counter under one key (known-answer tests).
  m.def("_philox4x32_10(int[] counter, int[] key) -> int[]");
  // CUDA only, for the benchmark: the Philox work of init_ on `numel` elements with no
  // stores but one folded word per thread into `out` (int32, at least as many elements
  // as the launch has threads; the number needed is returned by a call with out empty).
  m.def("_philox_roofline(Tensor(a!) out, int numel, int seed) -> int");
}

}  // namespace fp8_dummy
