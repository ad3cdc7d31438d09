// The public operators (torch.ops.fp8_dummy; docs/api.md), and the Python module fp8_dummy._C
// where setup.py builds one (CMake builds the library without Python).
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks
#endif
#include <torch/library.h>

#include <string>

#include "common/proof.h"

#ifdef FP8_DUMMY_PYTHON_MODULE
#include <dlfcn.h>

namespace {

// Python's C API, looked up in the process when fp8_dummy._C installs the hook: the library
// names no Python symbol but PyModule_Create2 (bound lazily), so that C++ programs dlopen it
// without Python (tests/test_packaging_cmake.py, tests/test_packaging_wheel.py).
struct PythonApi {
  int (*is_initialized)();
  PyGILState_STATE (*gil_ensure)();
  void (*gil_release)(PyGILState_STATE);
  PyObject* (*call)(PyObject*, const char*, ...);
  void (*fetch)(PyObject**, PyObject**, PyObject**);
  PyObject* (*str)(PyObject*);
  PyObject* (*utf8)(PyObject*);
  char* (*bytes)(PyObject*);
  void (*incref)(PyObject*);
  void (*decref)(PyObject*);
};
PythonApi py{};

template <typename F>
bool find(F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return f != nullptr;
}

PyObject* python_warn = nullptr;  // fp8_dummy._proof._warn

// A refusal as a Python RuntimeWarning (torch.ops calls do not forward TORCH_WARN); a filter
// that makes it an error raises.
void warn_in_python(const std::string& message) {
  if (!py.is_initialized()) {
    TORCH_WARN(message);
    return;
  }
  const PyGILState_STATE gil = py.gil_ensure();
  PyObject* result = py.call(python_warn, "s", message.c_str());
  std::string error;
  if (result == nullptr) {
    PyObject *type, *value, *trace;
    py.fetch(&type, &value, &trace);
    PyObject* text = value ? py.str(value) : nullptr;
    PyObject* bytes = text ? py.utf8(text) : nullptr;
    error = bytes ? py.bytes(bytes) : message;
    for (PyObject* o : {type, value, trace, text, bytes})
      if (o) py.decref(o);
  }
  if (result) py.decref(result);
  py.gil_release(gil);
  TORCH_CHECK(error.empty(), error);
}

// Returns the hook (a new reference); without Python's API in the process, refusals stay
// TORCH_WARNs.
PyObject* set_warning_hook(PyObject* /*module*/, PyObject* hook) {
  PythonApi api{};
  const bool found =
      find(api.incref, "Py_IncRef") && find(api.decref, "Py_DecRef") &&
      find(api.is_initialized, "Py_IsInitialized") && find(api.gil_ensure, "PyGILState_Ensure") &&
      find(api.gil_release, "PyGILState_Release") && find(api.call, "PyObject_CallFunction") &&
      find(api.fetch, "PyErr_Fetch") && find(api.str, "PyObject_Str") &&
      find(api.utf8, "PyUnicode_AsUTF8String") && find(api.bytes, "PyBytes_AsString");
  if (found) {
    py = api;
    py.incref(hook);  // kept for the process
    python_warn = hook;
    fp8_dummy::proof::set_warning_sink(&warn_in_python);
  }
  if (api.incref) api.incref(hook);
  return hook;
}

PyMethodDef methods[] = {{"_set_warning_hook", set_warning_hook, METH_O, nullptr},
                         {nullptr, nullptr, 0, nullptr}};

}  // namespace

// Importing fp8_dummy._C registers the operators below (stable ABI only: abi3).
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}
#endif  // FP8_DUMMY_PYTHON_MODULE

namespace fp8_dummy {

TORCH_LIBRARY(fp8_dummy, m) {
  m.set_python_module("fp8_dummy.ops");  // the fake kernels: torch imports it when needed
  // The reference path's bytes (docs/contract.md), g a fresh generator seeded with `seed`:
  // t = empty_like(self, float16).uniform_(low, high, generator=g); self.copy_(t) (1-byte
  // dtypes; contiguous_temp: TensorRT-LLM's torch.empty(self.shape)); wider: self.uniform_.
  m.def(
      "init_(Tensor(a!) self, float low=-0.001, float high=0.001, int seed=1234, *, "
      "bool contiguous_temp=False) -> ()");
  // The caller's generator (None: the device's default), advanced as by the reference.
  m.def(
      "init_.generator(Tensor(a!) self, float low, float high, *, Generator? generator, "
      "bool contiguous_temp=False) -> ()");
  // Every tensor gets init_'s bytes; on CUDA one launch per (device, dtype); tensors sharing
  // bytes with another last, in list order, as in a loop.
  m.def(
      "init_many_(Tensor(a!)[] tensors, float low=-0.001, float high=0.001, int seed=1234, *, "
      "bool contiguous_temp=False) -> ()");
  // int8/uint8: self.random_(low, high, generator=g)'s bytes, checks and messages.
  m.def("random_(Tensor(a!) self, int low, int high, int seed=1234) -> ()");
  m.def("random_.generator(Tensor(a!) self, int low, int high, *, Generator? generator) -> ()");
  // The device-independent mode: element idx takes the value of global element
  // element_offset + idx . element_strides (default: self's row-major strides; a shard passes
  // the global tensor's), from Philox (seed, key_offset) (include/fp8_dummy/cuda/stateless.h).
  m.def(
      "init_stateless_(Tensor(a!) self, float low=-0.001, float high=0.001, int seed=1234, "
      "*, int key_offset=0, int element_offset=0, int[]? element_strides=None) -> ()");
}

}  // namespace fp8_dummy
