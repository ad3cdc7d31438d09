// The one place where fp8_dummy's public operators (torch.ops.fp8_dummy) are defined;
// the internal ones (tests, diagnostics, emulators) are in internal_ops.cpp. Kernels:
// cpu/, cuda/ (csrc/README.md); the fake kernels in fp8_dummy/ops.py call
// fp8_dummy_internal::check_init_args (check_random_args) so trace-time errors are the
// run-time ones.
//
// setup.py builds this library as the Python module fp8_dummy._C and defines
// FP8_DUMMY_PYTHON_MODULE; the CMake build (CMakeLists.txt) builds the same library
// for libtorch-only C++ users without the module stub, so without Python's headers.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks
#endif
#include <torch/library.h>

#include <string>

#include "common/proof.h"

#ifdef FP8_DUMMY_PYTHON_MODULE
namespace {

PyObject* python_warn = nullptr;  // fp8_dummy._proof._warn

// A refusal as a Python RuntimeWarning (torch forwards TORCH_WARN to Python from its own
// bindings only, not from torch.ops calls); a filter that makes it an error raises.
void warn_in_python(const std::string& message) {
  if (!Py_IsInitialized()) {
    TORCH_WARN(message);
    return;
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* result = PyObject_CallFunction(python_warn, "s", message.c_str());
  std::string error;
  if (result == nullptr) {
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    PyObject* text = value ? PyObject_Str(value) : nullptr;
    PyObject* bytes = text ? PyUnicode_AsUTF8String(text) : nullptr;
    error = bytes ? PyBytes_AsString(bytes) : message;
    for (PyObject* o : {type, value, trace, text, bytes}) Py_XDECREF(o);
  }
  Py_XDECREF(result);
  PyGILState_Release(gil);
  TORCH_CHECK(error.empty(), error);
}

PyObject* set_warning_hook(PyObject* /*module*/, PyObject* hook) {
  Py_INCREF(hook);
  python_warn = hook;
  fp8_dummy::proof::set_warning_sink(&warn_in_python);
  Py_INCREF(Py_None);
  return Py_None;
}

PyMethodDef methods[] = {{"_set_warning_hook", set_warning_hook, METH_O, nullptr},
                         {nullptr, nullptr, 0, nullptr}};

}  // namespace

// Importing fp8_dummy._C loads this library, which registers the operators below. Only the
// stable ABI is used, which keeps the extension abi3-compatible.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}
#endif  // FP8_DUMMY_PYTHON_MODULE

namespace fp8_dummy {

TORCH_LIBRARY(fp8_dummy, m) {
  // Where the fake kernels live: torch imports it when it needs them.
  m.set_python_module("fp8_dummy.ops");
  // Fills `self` in place with the bytes of torch's reference path
  //   t = empty_like(self, float16); t.uniform_(low, high, generator=g); self.copy_(t)
  // (self.uniform_(...) for float16 and wider), g a fresh generator of self's device
  // seeded with `seed`. 1-byte dtypes: the FP8 ones, int8 and uint8 (copy_'s float16 ->
  // integer conversion: truncation toward zero). contiguous_temp: the temp is
  //   t = torch.empty(self.shape, dtype=float16)   (row-major, whatever self's strides)
  // and self.copy_(t.to(self.dtype)), as TensorRT-LLM's dummy loader does: a transposed,
  // permuted or sliced self gets its random numbers in row-major order, not memory order.
  // float16 and wider have no temp: it changes nothing for them. Returns nothing: mutated
  // inputs are not returned, which is what lets torch.compile functionalize the op.
  m.def(
      "init_(Tensor(a!) self, float low=-0.001, float high=0.001, int seed=1234, *, "
      "bool contiguous_temp=False) -> ()");
  // The same with a caller's generator (None: the device's default generator), which
  // is advanced exactly as the reference advances it.
  m.def(
      "init_.generator(Tensor(a!) self, float low, float high, *, Generator? generator, "
      "bool contiguous_temp=False) -> ()");
  // Every tensor of the list gets the bytes init_(t, low, high, seed, contiguous_temp=...)
  // would give it (each its own fresh generator). On CUDA the 1-byte tensors are filled by
  // one launch per (device, dtype); tensors that share bytes with another of the list are
  // filled one by one in list order, after the others, so the last one wins as in a loop.
  m.def(
      "init_many_(Tensor(a!)[] tensors, float low=-0.001, float high=0.001, int seed=1234, *, "
      "bool contiguous_temp=False) -> ()");
  // Fills the int8/uint8 tensor `self` in place with the bytes of
  //   self.random_(low, high, generator=g)     (torch's from, to: keywords in Python, which
  //                                             torch.compile's graphs cannot take as names)
  // (the engines' dummy init of int8, uint8 and, viewed as uint8, packed-FP4 weights), g a
  // fresh generator of self's device seeded with `seed`; torch's own checks and messages.
  // CPU: our parallel mt19937 stream (cpu/random_cpu.cpp); CUDA: torch's random_ itself.
  m.def("random_(Tensor(a!) self, int low, int high, int seed=1234) -> ()");
  // The same with a caller's generator (None: the device's default one), left in the state
  // torch's random_ leaves it in.
  m.def("random_.generator(Tensor(a!) self, int low, int high, *, Generator? generator) -> ()");
  // ---- Device-independent mode (cpu/stateless_cpu.cpp, cuda/stateless_cuda.cu). The element
  // of self at multi-index idx takes the value that
  //   torch.func._random.uniform_(key, t, low=low, high=high), key = (seed, key_offset),
  // gives element e = element_offset + sum(idx[d] * element_strides[d]) of a contiguous
  // tensor t (float16 for FP8 self, then converted as copy_ does; self's dtype otherwise).
  // element_strides defaults to the row-major strides of self's shape (e = the logical
  // index); a shard of a global tensor passes its offset and the global tensor's strides.
  // int8/uint8 self (and packed FP4 viewed as uint8): random bytes, integer bounds [low, high),
  // element e = low + (its Philox word) % (high - low) (include/fp8_dummy/cuda/stateless.h).
  // The bytes depend only on (seed, key_offset, e, bounds, dtype): not on the device, the
  // thread count or the sharding.
  m.def(
      "init_stateless_(Tensor(a!) self, float low=-0.001, float high=0.001, int seed=1234, "
      "*, int key_offset=0, int element_offset=0, int[]? element_strides=None) -> ()");
}

}  // namespace fp8_dummy
